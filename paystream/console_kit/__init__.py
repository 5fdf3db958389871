"""The console's web kit: what a feature's console pages are made with, below the
features (.importlinter's layers), so each feature's `console_routes.py` imports it
from its own folder. The app that assembles them is console/ (`paystream console`).

  settings.py      the console's settings (PAYSTREAM_CONSOLE_*)
  access.py        console keys, login sessions, the CSRF token of a session
  audit.py         the record of operator actions (operator_actions)
  database.py      each page's work in one transaction of a database thread
  web.py           the templates, security headers and host check, the logged-in
                   operator and CSRF-checked form dependencies, an action with its
                   record (`act`), a page (`render`)
  templates/       base.html, the frame every page extends; error.html, a refusal's page
"""
