"""The allocation engine: Dynamic Resource Allocation (resource.k8s.io/v1) semantics in Python.

Inputs are plain dicts in the API's JSON shape (ResourceSlice, DeviceClass, ResourceClaim, Node);
outputs are ``status.allocation`` dicts or explanations of why no allocation exists.
"""
