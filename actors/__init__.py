"""Ray actors of quotaplane (``quotaplane.actors``): the ConfigController, the single writer of the config
event log, and the ShardActors that host the core managers for their slice of entities."""
