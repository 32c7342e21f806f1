"""The adapters that run the core as processes: the gRPC gateway and AdminService, the Kafka-facing frontend
and its proxy mode, the metrics endpoint, the launcher and the command line."""
