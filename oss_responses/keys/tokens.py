"""Key ids and secrets: a secret is 256 random bits, shown once; SQL keeps only its sha256.

A plain (unsalted, fast) hash is enough here: the secret is high-entropy random, not a password, so
nothing can be guessed from its hash; and a hash that is a pure function of the secret lets the API
find the key by an indexed lookup of it.
"""

from __future__ import annotations

import hashlib
import secrets

SECRET_PREFIX = "sk-oss-"
KEY_ID_PREFIX = "key_"


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def new_key_id() -> str:
    return KEY_ID_PREFIX + secrets.token_hex(8)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()
