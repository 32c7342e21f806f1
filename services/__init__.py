"""Processes around the core: the command line now; gateway, frontend and launcher later."""
