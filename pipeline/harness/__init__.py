"""The qualification harness: gates run against a live NInfer endpoint (used by stages/qualify.py).

`client` speaks the serving protocol (HTTP, SSE, reachability probes), `fixtures` makes the
prompts, `gpu` reads the host's GPU through nvidia-smi, and `gates` judges; each gate returns
a `Gate` that the stage writes into the lane receipt.
"""
