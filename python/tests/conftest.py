import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("CADRE_BUILD_DIR", os.path.join(ROOT, "build"))

for p in (os.path.join(ROOT, "python"), os.path.join(BUILD, "python")):
    if p not in sys.path:
        sys.path.insert(0, p)
# The tests' shared helpers (socket_helpers.py), after the packages.
if os.path.join(ROOT, "tests") not in sys.path:
    sys.path.append(os.path.join(ROOT, "tests"))
