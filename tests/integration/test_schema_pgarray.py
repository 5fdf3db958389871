"""schema.pgarray.text_array reads back, through the real Postgres, as the very strings."""

from __future__ import annotations

from paystream.schema.pgarray import text_array


def test_text_array_round_trips_any_text(db) -> None:
    values = ["plain", 'a "quoted" one', "back\\slash\\", "{brace},comma", " spaced ",
              "NULL", "", "ünïcödé", "tab\tnew\nline", "'single'"]
    with db.cursor() as cur:
        cur.execute("SELECT %s::text[], %s::text[]", (text_array(values), text_array([])))
        assert cur.fetchone() == (values, [])
        # As a psycopg2 list would: the same array.
        cur.execute("SELECT %s::text[] = %s::text[]", (text_array(values), values))
        assert cur.fetchone() == (True,)
