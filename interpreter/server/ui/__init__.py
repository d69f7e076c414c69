"""``/ui``: the server-rendered pages for people (docs/operations.md "The approvals page").

Sign-in with an API token sets a server-side session (:mod:`.sessions`); every form carries the session's
CSRF token; every page is sent with a strict Content-Security-Policy and needs no script.
"""
