"""Supply chain: who may sign which definitions, and checking that they did (``docs/trust.md``).

* :mod:`sealflow.dsl.trust.signing`: Ed25519 keys and DSSE envelopes over a definition's exact bytes;
* :mod:`sealflow.dsl.trust.policy`: the trust policy (keys, Sigstore identities, namespaces) and
  :class:`Refused`, the reasons a definition is refused;
* :mod:`sealflow.dsl.trust.verify`: a signed definition against a policy, over bytes read once.

This ``__init__`` is the public API; inside the package, modules import from each other.
"""

from sealflow.dsl.trust.policy import (
    ANY_NAMESPACE,
    DSSE_SUFFIX,
    MAX_BUNDLE_BYTES,
    POLICY_CODES,
    POLICY_SCHEMA,
    REASONS,
    SIGSTORE,
    SIGSTORE_SUFFIX,
    Identity,
    Key,
    PolicyError,
    Refused,
    TrustPolicy,
    load_policy,
)
from sealflow.dsl.trust.verify import (
    Verified,
    bundle_kind,
    namespace_of,
    signature_files,
    verify_bytes,
    verify_envelope,
    verify_file,
    verify_sigstore,
)

__all__ = [
    "ANY_NAMESPACE", "DSSE_SUFFIX", "MAX_BUNDLE_BYTES", "POLICY_CODES", "POLICY_SCHEMA", "REASONS", "SIGSTORE",
    "SIGSTORE_SUFFIX", "Identity", "Key", "PolicyError", "Refused", "TrustPolicy", "Verified", "bundle_kind",
    "load_policy", "namespace_of", "signature_files", "verify_bytes", "verify_envelope", "verify_file",
    "verify_sigstore",
]
