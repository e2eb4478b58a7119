"""The fleet experiment of scaling on the diagnosis: ``python -m lab.scaling`` (docs/deployment.md#autoscaling).

``hpa``: the HorizontalPodAutoscaler's documented algorithm; ``fleet``: simulated replicas behind a
router with the traffic and episodes of the experiment; ``__main__``: the three policies and their table.
"""
