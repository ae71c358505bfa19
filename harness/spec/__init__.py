"""The spec stage: an experiment file becomes typed settings, links and topologies (validated
once)."""
