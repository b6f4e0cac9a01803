"""Fleet quota plan: every ClusterQueue of a flavor and resource decided together (``gpulens plan``)."""
