"""The names of an optimizer's parameters, for both distributed optimizers (optimizer.py and
adasum_optimizer.py, between which optimizer.py chooses): Horovod's checks and its names for
unnamed parameters."""


def named_parameter_table(optimizer, named_parameters):
    """{id(parameter): name} after Horovod's checks; unnamed parameters are named by group and
    position, unique across groups and never equal to generated collective names."""
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = [("allreduce.noname.%d.%d" % (g, i), v)
                            for g, param_group in enumerate(optimizer.param_groups)
                            for i, v in enumerate(param_group["params"])]
    if any(not isinstance(p, tuple) for p in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    names = [k for k, _ in named_parameters]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. Found "
                         "duplicates: %s" % ", ".join(dups))
    all_params = {id(v) for group in optimizer.param_groups for v in group["params"]}
    unnamed = all_params - {id(v) for _, v in named_parameters}
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters "
                         "were not named (%d of them)" % len(unnamed))
    return {id(v): k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
