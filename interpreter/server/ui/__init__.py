"""``/ui``: the server-rendered pages for people (docs/operations.md "The console: approvals and runs pages").

Sign-in with an API token sets a server-side session (:mod:`.sessions`); every form carries the session's
CSRF token; every page is sent with a strict Content-Security-Policy and works without script (the run page's
``static/live.js`` only follows its live feed).
"""
