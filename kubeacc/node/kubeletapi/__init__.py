"""The kubelet's gRPC APIs, generated from the .proto files beside this module.

Regenerate with ``bash scripts/gen-protos.sh`` after editing a .proto file.
"""
