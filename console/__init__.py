"""The operator console (`paystream console`, docs/console.md): server-rendered HTML
pages on a loopback port, for finding any event and acting on dead letters,
notifications, shortfalls and statement differences without SQL. It runs as the
operator's role and its actions are the operator commands' own functions, each recorded
in operator_actions.

What every page is made with (settings, keys and sessions, the audit, the database,
templates, CSRF-checked forms) is the console's web kit, paystream/console_kit/.

  app.py                     the app: routers, the templates and the navigation, error
                             pages, the request observer
  cli.py                     `paystream console` and `console keys create|list|revoke`
  search.py                  the search box: an event, user, trace, key, hash, address
  story.py                   an event's whole story: body, outcome, postings, dead
                             letters, notifications, timeline
  routes_auth.py             login and logout
  routes_search.py           search, the event page, the user page
  routes_dead_letters.py     the dead letters: list, detail, replay, bulk replay, discard
  routes_notifications.py    deliveries, attempts, redeliver, recover; endpoints
  routes_ledger.py           shortfalls with resolve, holds, reconcile
  routes_statements.py       settlement statements: the list, a statement's lines beside
                             our events by result, approve a proposed fee adjustment
  routes_keys.py             merchants' API keys: listed by merchant, revoked
  routes_health.py           `paystream health`, rendered
  routes_alerts.py           Alertmanager's alerts and silences; silence, expire
  routes_audit.py            the audit page
  templates/                 the pages (Jinja2, autoescaped) of the routes above; their
                             frame is the kit's; static/ the stylesheet
"""
