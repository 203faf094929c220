"""Imported by the tests' fork server (:mod:`support.forked`) after the commands' modules: the part of
every command's start that is the same each time, done once in the server instead of in each child.

- Celery's command line (``celery.bin.celery``), which ``worker_main`` imports at each worker's start:
  with its subcommands it brings click-repl and prompt_toolkit, ~0.9 s of CPU.
- The openai types' validators (``schemas.build_protocol_schemas``) and the harmony encoding
  (``vocab.load_encoding``, cached per folder: the tests' services all use ``var/tiktoken``): ~0.5 and
  ~0.3-0.4 s in each worker and API process. The child still calls both; it finds them done.
- ``gc.freeze()`` of all that, so that a child's start-up collection (``heap.tune_garbage_collection``)
  does not walk it again.

What a child does with its settings (its database, Redis, engine, vocabulary check) still happens in it.
"""

import gc

import celery.bin.celery  # noqa: F401

from oss_responses.schemas import build_protocol_schemas
from oss_responses.vocab import load_encoding
from support import TIKTOKEN_DIR

build_protocol_schemas("the tests' fork server")
load_encoding(TIKTOKEN_DIR)
gc.freeze()
