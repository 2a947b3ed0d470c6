"""The web view: server-rendered pages for operators and auditors (``docs/web.md``).

Pages read the engine and the store directly (as the API does) and are plain
HTML: lists, messages, diagrams and the audit log read without JavaScript.
One small script (``web/web.js``) adds the live parts: streamed text, the
running-turn count, form posts without a page load. Everything is served
from ``turnfsm/server/web/``; a page makes no request to any other host
(its ``Content-Security-Policy`` says so to the browser too).

- ``_access.py``: who may see a page (tokens, the cookie, same-origin form
  posts), and errors as pages;
- ``_views.py``: what the pages show, made from the engine's records;
- ``_routes.py``: the routes (:data:`router`, included by ``create_app``).
"""

from ._access import COOKIE, addressed_directly, same_origin
from ._routes import router
from ._views import branch_paths

__all__ = ["COOKIE", "addressed_directly", "branch_paths", "router", "same_origin"]
