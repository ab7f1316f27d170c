"""What the unit and the integration tests of dedup_components share."""

from __future__ import annotations

import collections

from pipelines.dedup.components import (
    large_star,
    settle_messages,
    settle_star,
    small_star,
    star_center,
)
from tests.measure import find_root


def node(i: int) -> tuple[int, str]:
    return (i % 2, f"doc{i:05d}")


def union_find_min(edges):
    """Reference: each node of an edge -> the smallest node of its component."""
    parent = {}
    for u, v in edges:
        ru, rv = find_root(parent, u), find_root(parent, v)
        if ru != rv:
            parent[max(ru, rv)] = min(ru, rv)
    return {x: find_root(parent, x) for x in list(parent)}


def neighbours(edges) -> dict:
    """node -> the nodes its edges point to, as a GroupByKey hands them to a star step."""
    groups = collections.defaultdict(list)
    for u, v in edges:
        groups[u].append(v)
    return groups


def run_rounds(edges, max_rounds, settle_after=()):
    """The Beam graph's rounds, in memory: returns ({leaf: centre}, rounds that changed edges).
    After each round in settle_after, finished stars leave (settle)."""
    edges = [e for u, v in edges for e in ((u, v), (v, u))]
    changed_rounds = 0
    result = {}
    for r in range(1, max_rounds + 1):
        changes = 0
        stepped = []
        for u, nbrs in neighbours(edges).items():
            for e, c in large_star(u, nbrs):
                stepped.append(e)
                changes += c
        edges = []
        for u, nbrs in neighbours(stepped).items():
            for e, c in small_star(u, nbrs):
                edges += [e, (e[1], e[0])]
                changes += c
        changed_rounds += changes > 0
        if r in settle_after:
            finished, edges = settle(edges)
            result.update(finished)
        if not changes:
            break
    for u, nbrs in neighbours(edges).items():
        center = star_center(u, nbrs, max_rounds)
        if center is not None:
            result[u] = center
    return result, changed_rounds


def settle(edges):
    """One settle pass in memory over directed edges: ({leaf: centre} finished, open edges)."""
    by_node, by_key = collections.defaultdict(list), collections.defaultdict(list)
    for u, v in edges:
        by_node[u].append(v)
    for u, nbrs in by_node.items():
        for key, message in settle_messages(u, nbrs):
            by_key[key].append(message)
    finished, still_open = {}, []
    for key, messages in by_key.items():
        done, others = settle_star(key, messages)
        for other in others:
            if done:
                finished[other] = key
            else:
                still_open += [(other, key), (key, other)]
    return finished, still_open
