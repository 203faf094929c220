"""API keys: their secrets (``tokens.py``) and the command line that creates, lists and revokes them
(``cli.py``, ``python -m oss_responses.keys``). Storage is ``storage/api_keys.py``; the API checks a
request's key in ``api/auth.py``."""
