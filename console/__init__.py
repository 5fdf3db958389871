"""The operator console (`paystream console`, docs/console.md): server-rendered HTML
pages on a loopback port, for finding any event and acting on dead letters,
notifications, shortfalls and statement differences without SQL. It runs as the
operator's role and its actions are the operator commands' own functions, each recorded
in operator_actions.

What every page is made with (settings, keys and sessions, the audit, the database,
templates, CSRF-checked forms) is the console's web kit, paystream/console_kit/.

  app.py                     the app: routers, the templates and the navigation, error
                             pages, the request observer
  pages.py                   how the features' pages are found: each feature's
                             `console_routes.py` (dead letters, notifications and
                             endpoints, the ledger, statements, API keys), in its folder
  cli.py                     `paystream console` and `console keys create|list|revoke`
  search.py                  the search box: an event, user, trace, key, hash, address
  story.py                   an event's whole story: body, outcome, postings, dead
                             letters, notifications, timeline

The console's own pages, those of no one feature:
  routes_auth.py             login and logout
  routes_search.py           search, the event page, the user page
  routes_health.py           `paystream health`, rendered
  routes_alerts.py           Alertmanager's alerts and silences; silence, expire
  routes_audit.py            the audit page
  templates/                 the pages (Jinja2, autoescaped) of the routes above; their
                             frame is the kit's; static/ the stylesheet
"""
