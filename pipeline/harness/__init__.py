"""The qualification harness: gates run against a live NInfer endpoint (used by stages/qualify.py)."""
