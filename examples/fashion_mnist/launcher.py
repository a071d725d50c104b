"""Sample launcher for parameter-server jobs, as the seed service provided: every learner runs
`python3 launcher.py SCRIPT [ARGS...]`; learners 1..PS_HOSTS_COUNT become parameter servers
(cadre.ps.serve(), which returns when every worker is done) and the others run SCRIPT as workers.

TensorFlow users get TF_CONFIG from the runner instead ({"cluster": {"ps": [...], "worker":
[...]}, "task": {...}}) and can pick the role from it the same way.
"""
import os
import runpy
import sys

import cadre.ps as ps


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: launcher.py SCRIPT [ARGS...]")
    me = ps.learner_role()
    if me["role"] == "ps":
        print("learner %d: parameter server %d of %d on %s for %d workers"
              % (me["learner_id"], me["learner_id"], me["num_servers"], me["listen_address"],
                 me["num_workers"]), flush=True)
        ps.serve()
        print("learner %d: every worker is done" % me["learner_id"], flush=True)
        return
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
