"""Differential testing of the allocation engine against kube-scheduler's own allocator.

``build`` compiles the Go harness in ``tools/allocator`` (cached like the testbed), ``harness``
talks to it, ``generator`` makes seeded scenarios, ``validator`` checks an allocation
independently of the engine, ``compare`` runs both sides and reports disagreements.
"""
