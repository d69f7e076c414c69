"""``sealflow serve``: the runtime's operations over HTTP (FastAPI on uvicorn), authenticated.

Rooms: ``app`` builds the ASGI application (and the factory uvicorn's worker processes call);
``settings`` what a server is started with; ``auth`` who a request is (API tokens, ``tokens`` minting and
checking them, ``oidc`` verifying OIDC JWTs), ``ratelimit`` how often a principal may ask; ``problems`` every
error as RFC 9457 problem details with a stable ``type``; ``middleware`` the request body bound and the
open-mode banner; ``schemas`` request and response bodies; ``submitting`` which plan a ``POST /v1/runs``
names; ``routes/`` one module per resource. docs/operations.md describes running it.
"""
