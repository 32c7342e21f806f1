"""quotaplane's protobuf messages and gRPC services (``quotaplane.v1``), generated at install from the
``.proto`` files beside this module (see ``setup.py``)."""
