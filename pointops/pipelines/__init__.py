"""Pipelines built from the pointops operators: detectors and matchers that chain several ops.

Each pipeline is plain torch on the ops: batched, on the inputs' device, with no host sync.
"""
