"""The dashboard (`snaprun ui`, docs/ui.md): a web page over a store, served on
127.0.0.1 by default.

_views.py reads the store (jobs, a job's timeline, a snapshot's frames, one
value by path, a diff, the approvals) and makes the decisions (approve, reject,
reconcile) through the same runtime functions the CLI calls; it imports no web
library. _security.py is the
gate every request passes (the token, the session cookie, the CSRF token, the
same-origin check, the response headers); _app.py the Starlette routes and the
Jinja2 templates (autoescaped) in templates/, with the script and style sheet in
static/; _serve.py binds the socket and runs uvicorn. The web libraries come with
the `ui` extra (`pip install 'snapstate[ui]'`): nothing imports this package but
`snaprun ui` (runtime/_cli/_ui.py), so snapstate runs without them."""
