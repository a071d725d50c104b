"""``horovod.common``: the framework-neutral names scripts import (exceptions, elastic state)."""
