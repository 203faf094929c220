"""``make soak``: the randomized fault soak (support/soak.py) as a script.

``PYTHONPATH=.:tests python tests/workers/soak.py --rounds N --seed S [--postgres]`` (the Makefile sets
``PYTHONPATH``); the test run runs a few rounds of it in ``test_soak.py``.
"""

from support.soak import main

if __name__ == "__main__":
    main()
