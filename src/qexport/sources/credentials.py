"""Source URLs at rest: sealed with a key derived from QEXPORT_SECRET_KEY, or kept in a
variable of the environment and named by reference.

A registered source's URL carries its credentials. When QEXPORT_SECRET_KEY is set it is
stored sealed: `v2:` and the URL-safe base64 of a 12-byte nonce and its AES-256-GCM
ciphertext, under a key derived from the secret with HKDF-SHA256, the source's workspace and
name as associated data (a sealed URL copied to another row does not open, nor to the row of
another workspace's source of the same name: names are per workspace). `v1:` URLs, sealed
with the name alone when names were unique across the installation, still open. Without the
secret it
is stored as given: the installation's generated secret lives in the same database, so
sealing with it would hide nothing. `env:NAME` stores only the name of a variable that each
worker reads from its own environment, so the credential never reaches the database.
The version prefix lets a later scheme be added while old rows still open.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
from collections.abc import Mapping

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from qexport.domain.failures import QExportError

SEALED_PREFIX = "v2:"
_NAME_ONLY_PREFIX = "v1:"  # sealed before names were per workspace: the name alone bound
ENV_PREFIX = "env:"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
_NONCE_BYTES = 12
_KDF_INFO = b"qexport source credentials v1"


class SourceCredentialsError(QExportError):
    """A stored source URL cannot be opened: the secret key changed, or a variable is unset."""


def _key(secret_key: str) -> bytes:
    kdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_KDF_INFO)
    return kdf.derive(secret_key.encode())


def _aad(name: str, owner: str | None) -> bytes:
    if owner is None:
        return f"qexport-source:{name}".encode()
    return f"qexport-source:{owner}/{name}".encode()


def env_reference(url: str) -> str | None:
    """The variable an `env:NAME` URL names, or None for any other URL."""
    if not url.startswith(ENV_PREFIX):
        return None
    name = url.removeprefix(ENV_PREFIX)
    if not _ENV_NAME.fullmatch(name):
        raise ValueError(f"{ENV_PREFIX}{name!r} does not name an environment variable")
    return name


def seal(name: str, url: str, secret_key: str, *, owner: str | None) -> str:
    """The URL as it is stored for the source `owner` registers as `name`: sealed with the
    secret key when there is one; an `env:` reference always as it is."""
    if not secret_key or env_reference(url) is not None:
        return url
    nonce = secrets.token_bytes(_NONCE_BYTES)
    sealed = AESGCM(_key(secret_key)).encrypt(nonce, url.encode(), _aad(name, owner or ""))
    return SEALED_PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode()


def is_sealed(stored: str) -> bool:
    return stored.startswith((SEALED_PREFIX, _NAME_ONLY_PREFIX))


def unseal(
    name: str,
    stored: str,
    secret_key: str,
    environ: Mapping[str, str] | None = None,
    *,
    owner: str | None,
) -> str:
    """The usable URL of a stored one (of the source `owner` registered as `name`);
    SourceCredentialsError (naming the source, never the URL) when it cannot be opened."""
    variable = env_reference(stored)
    if variable is not None:
        value = (os.environ if environ is None else environ).get(variable, "")
        if not value:
            raise SourceCredentialsError(
                f"source {name!r} reads its URL from ${variable}, which is not set here"
            )
        return value
    if not is_sealed(stored):
        return stored
    if not secret_key:
        raise SourceCredentialsError(
            f"source {name!r} was registered with QEXPORT_SECRET_KEY set; set the same key"
            " to use it"
        )
    try:
        bound = None if stored.startswith(_NAME_ONLY_PREFIX) else owner or ""
        raw = base64.urlsafe_b64decode(stored[len(SEALED_PREFIX) :].encode())
        opened = AESGCM(_key(secret_key)).decrypt(
            raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _aad(name, bound)
        )
    except (InvalidTag, ValueError, binascii.Error):
        raise SourceCredentialsError(
            f"the credentials of source {name!r} cannot be decrypted: QEXPORT_SECRET_KEY is"
            " not the key they were stored with (restore it, or register the source again)"
        ) from None
    return opened.decode()
