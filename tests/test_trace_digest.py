"""The traces of many seeds under many configurations are pinned by digest.

A speed-up of the kernel must not change a single byte of any trace: the same seed
must make the same decisions, records and verdict.  For the shipped scenarios,
each config (the default and every planted bug's) is run under the
random walk, at ``preemptions=0``, under ``pct`` and under ``swarm``; the digest of
every run's record lines and footer (the header names the Python and trio versions)
is compared with the one pinned here, and so is the first seed that failed.

A change that is meant to change traces (a new kind of record, another label)
re-pins them: run this file with ``DST_PRINT_DIGESTS=1`` and paste what it prints.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any

import pytest

from dst.explore.strategies import explore
from dst.registry import load
from dst.runner.single import RunResult, run_seeds
from dst.scenario import Scenario

SEEDS = 20
SCENARIOS = (
    "agent_openai",
    "approval",
    "approval_disclosure",
    "approval_params",
    "approval_surface",
    "counter",
    "counter_asyncio",
    "ping",
    "replenish_concurrency",
    "replenish_crash",
    "replenish_deploy",
    "replenish_history",
    "replenish_lost_goods",
    "replenish_lost_reply",
    "replenish_outage",
    "replenish_price",
    "replenish_unreachable",
    "replenish_untrusted",
)
SPECS = ("random", "preemptions=0", "pct", "swarm")

#: (scenario, config label, spec) -> (digest prefix, first failing seed or None).
PINNED: dict[str, tuple[str, int | None]] = {
    'agent_openai [default] random': ('d0c1bec9608dd51e', None),
    'agent_openai [default] preemptions=0': ('d0c1bec9608dd51e', None),
    'agent_openai [default] pct': ('e1a27cbb16a5729a', None),
    'agent_openai [default] swarm': ('d0c1bec9608dd51e', None),
    'agent_openai [idempotent=False] random': ('49a9e805b495caa0', 1),
    'agent_openai [idempotent=False] preemptions=0': ('49a9e805b495caa0', 1),
    'agent_openai [idempotent=False] pct': ('d3ad3f38f267bc84', 6),
    'agent_openai [idempotent=False] swarm': ('49a9e805b495caa0', 1),
    'approval [default] random': ('e00c1828e802081c', None),
    'approval [default] preemptions=0': ('d3612a89a756a648', None),
    'approval [default] pct': ('3e95d7c5ac6bbb87', None),
    'approval [default] swarm': ('ecf85a16e937ec25', None),
    'approval [spend_mode=after] random': ('e375e6166fb095bd', 0),
    'approval [spend_mode=after] preemptions=0': ('7325ef66d6b39486', 2),
    'approval [spend_mode=after] pct': ('39183e65a626d048', 0),
    'approval [spend_mode=after] swarm': ('38aaae9c8e0e1b79', 0),
    'approval [spend_mode=before] random': ('273071587deffaea', 4),
    'approval [spend_mode=before] preemptions=0': ('36f55b52b8db0bd2', 8),
    'approval [spend_mode=before] pct': ('c8bf2db813e0b6e4', 15),
    'approval [spend_mode=before] swarm': ('2e9279273ef57400', None),
    'approval [spend_mode=before fresh_view=False] random': ('d6feff8b2ef06e04', 2),
    'approval [spend_mode=before fresh_view=False] preemptions=0': ('7d9bda4a4149625c', 2),
    'approval [spend_mode=before fresh_view=False] pct': ('79014f580bdb6455', 6),
    'approval [spend_mode=before fresh_view=False] swarm': ('36cd17c611525f95', 7),
    'approval_disclosure [default] random': ('3152acf796df0ca3', None),
    'approval_disclosure [default] preemptions=0': ('05d4ec754eac291b', None),
    'approval_disclosure [default] pct': ('8487fb563b612592', None),
    'approval_disclosure [default] swarm': ('5a93bc266e0741e3', None),
    'approval_disclosure [disclose_on_error=False] random': ('54afb318fdbbe11b', 0),
    'approval_disclosure [disclose_on_error=False] preemptions=0': ('8da2b59c14b73bf9', 2),
    'approval_disclosure [disclose_on_error=False] pct': ('ad909b229907da7f', 0),
    'approval_disclosure [disclose_on_error=False] swarm': ('15ed2bfe30ef8c33', 2),
    'approval_params [default] random': ('ff88eb99c74a9de5', None),
    'approval_params [default] preemptions=0': ('b8ae84b9a14edc21', None),
    'approval_params [default] pct': ('396d2bc7a111972b', None),
    'approval_params [default] swarm': ('622b823baff01873', None),
    'approval_params [bind_params=False] random': ('63564c636712ade4', 4),
    'approval_params [bind_params=False] preemptions=0': ('33bc8a167acfd265', 16),
    'approval_params [bind_params=False] pct': ('f3671d6bcc3d50e0', None),
    'approval_params [bind_params=False] swarm': ('a521809b14c2ec4b', 8),
    'approval_surface [default] random': ('1ad315e732d96705', None),
    'approval_surface [default] preemptions=0': ('dae9f781e94f0d9e', None),
    'approval_surface [default] pct': ('084fad1bcd09eb56', None),
    'approval_surface [default] swarm': ('b382a8546e62ef90', None),
    'approval_surface [route_to_newest=True history_first_final=True] random':
        ('8ce0c4340c473c55', 4),
    'approval_surface [route_to_newest=True history_first_final=True] preemptions=0':
        ('c193d22dae1ef80f', None),
    'approval_surface [route_to_newest=True history_first_final=True] pct': ('bad504684c9ea740', 1),
    'approval_surface [route_to_newest=True history_first_final=True] swarm':
        ('764698a57c8544a3', None),
    'approval_surface [persist_card_first=False] random': ('8539fc89956a81ae', 4),
    'approval_surface [persist_card_first=False] preemptions=0': ('04ff11278f0dc0c1', 2),
    'approval_surface [persist_card_first=False] pct': ('f03b5ac988edd117', 0),
    'approval_surface [persist_card_first=False] swarm': ('4f794dcd51da8760', 0),
    'counter [default] random': ('6e958d46c74a0b97', None),
    'counter [default] preemptions=0': ('6e958d46c74a0b97', None),
    'counter [default] pct': ('59e4c73adbd4c3f6', None),
    'counter [default] swarm': ('6e958d46c74a0b97', None),
    'counter [cas=False] random': ('7816c3e5bedb9057', 0),
    'counter [cas=False] preemptions=0': ('7816c3e5bedb9057', 0),
    'counter [cas=False] pct': ('3a0a5a21b0af1217', 1),
    'counter [cas=False] swarm': ('7816c3e5bedb9057', 0),
    'counter_asyncio [default] random': ('6e958d46c74a0b97', None),
    'counter_asyncio [default] preemptions=0': ('6e958d46c74a0b97', None),
    'counter_asyncio [default] pct': ('59e4c73adbd4c3f6', None),
    'counter_asyncio [default] swarm': ('6e958d46c74a0b97', None),
    'counter_asyncio [cas=False] random': ('7816c3e5bedb9057', 0),
    'counter_asyncio [cas=False] preemptions=0': ('7816c3e5bedb9057', 0),
    'counter_asyncio [cas=False] pct': ('3a0a5a21b0af1217', 1),
    'counter_asyncio [cas=False] swarm': ('7816c3e5bedb9057', 0),
    'ping [default] random': ('69034dea20ec16a7', None),
    'ping [default] preemptions=0': ('69034dea20ec16a7', None),
    'ping [default] pct': ('54d4901bbce7a94c', None),
    'ping [default] swarm': ('7caa438b988c2f1b', None),
    'ping [dedup=False] random': ('6d0a476a4ce33aab', 0),
    'ping [dedup=False] preemptions=0': ('6d0a476a4ce33aab', 0),
    'ping [dedup=False] pct': ('07f08c455d75ecdb', 0),
    'ping [dedup=False] swarm': ('a5bed6cb8b27e06c', 1),
    'replenish_concurrency [default] random': ('05f55b69b3be0fe1', None),
    'replenish_concurrency [default] preemptions=0': ('d46adaa59a526683', None),
    'replenish_concurrency [default] pct': ('3c8e3547cc063708', None),
    'replenish_concurrency [default] swarm': ('dc549d59e86bedd5', None),
    'replenish_concurrency [count_active=False] random': ('1c11152ca88e1109', 0),
    'replenish_concurrency [count_active=False] preemptions=0': ('acf7bcbfa7d839aa', 0),
    'replenish_concurrency [count_active=False] pct': ('2aaeabf7a15998d0', 0),
    'replenish_concurrency [count_active=False] swarm': ('da6431753a289eb7', 0),
    'replenish_crash [default] random': ('3fc9c98955fd650a', None),
    'replenish_crash [default] preemptions=0': ('abdd49823b6fa94f', None),
    'replenish_crash [default] pct': ('f81d745f6e5fe4ab', None),
    'replenish_crash [default] swarm': ('946e50c2e4cb40bb', None),
    'replenish_crash [durable=False] random': ('9ca4f8e987faedd8', 0),
    'replenish_crash [durable=False] preemptions=0': ('fea0d04463b7d0a2', 0),
    'replenish_crash [durable=False] pct': ('fe03939996a873fa', 1),
    'replenish_crash [durable=False] swarm': ('f3091151f1702673', 0),
    'replenish_deploy [default] random': ('f4921f1b373d44aa', None),
    'replenish_deploy [default] preemptions=0': ('fcfb1d1914127138', None),
    'replenish_deploy [default] pct': ('b766e953d28e3f33', None),
    'replenish_deploy [default] swarm': ('f10a5fc3bdbba2e0', None),
    'replenish_deploy [version_branch=False check_inputs=False] random': ('2c7c8add862a2636', 9),
    'replenish_deploy [version_branch=False check_inputs=False] preemptions=0':
        ('26fc134475005ffc', 10),
    'replenish_deploy [version_branch=False check_inputs=False] pct': ('aa4c75584941ee28', None),
    'replenish_deploy [version_branch=False check_inputs=False] swarm': ('0686b83344fcdcd3', 9),
    'replenish_history [default] random': ('b282e2b930f553b9', None),
    'replenish_history [default] preemptions=0': ('5dc94b98d05202fd', None),
    'replenish_history [default] pct': ('8efaf847d6cc9aed', None),
    'replenish_history [default] swarm': ('767d468fade147bf', None),
    'replenish_history [continue_as_new=False] random': ('ab93615eca4666b5', 0),
    'replenish_history [continue_as_new=False] preemptions=0': ('7746d4c341c02f67', 0),
    'replenish_history [continue_as_new=False] pct': ('a33f878f402872bd', 0),
    'replenish_history [continue_as_new=False] swarm': ('c0664a159d0cd1cc', 1),
    'replenish_history [carry_state=False] random': ('cb57610812d8c3a4', 1),
    'replenish_history [carry_state=False] preemptions=0': ('7a4c1e5eaef3e7cb', 2),
    'replenish_history [carry_state=False] pct': ('d65851f733197670', 0),
    'replenish_history [carry_state=False] swarm': ('2129be35f0554e92', 0),
    'replenish_lost_goods [default] random': ('08d0ecd420a4821c', None),
    'replenish_lost_goods [default] preemptions=0': ('a8e2f98d5ce80875', None),
    'replenish_lost_goods [default] pct': ('5e700986bcf89777', None),
    'replenish_lost_goods [default] swarm': ('3e6a1e6c931902e9', None),
    'replenish_lost_goods [chase_limit=False] random': ('ee1bb21c78f1af1d', 3),
    'replenish_lost_goods [chase_limit=False] preemptions=0': ('1a413901cb08fdbe', 1),
    'replenish_lost_goods [chase_limit=False] pct': ('a2e0c5573f2ff311', 2),
    'replenish_lost_goods [chase_limit=False] swarm': ('02bdc3d9a5280b14', 0),
    'replenish_lost_reply [default] random': ('a204b5ab08a323cd', None),
    'replenish_lost_reply [default] preemptions=0': ('2ceb317c26048764', None),
    'replenish_lost_reply [default] pct': ('362c6a75f1137684', None),
    'replenish_lost_reply [default] swarm': ('8623007f5bd37290', None),
    'replenish_lost_reply [stable_key=False] random': ('abd90e135f203a30', 6),
    'replenish_lost_reply [stable_key=False] preemptions=0': ('02a630f6fe0eb461', 4),
    'replenish_lost_reply [stable_key=False] pct': ('95a45169b101323c', 13),
    'replenish_lost_reply [stable_key=False] swarm': ('8d0b350e211193a7', 1),
    'replenish_outage [default] random': ('35a46cb2a7d0a0e3', None),
    'replenish_outage [default] preemptions=0': ('9102b8528c3543cf', None),
    'replenish_outage [default] pct': ('6861671453574d8d', None),
    'replenish_outage [default] swarm': ('12bbe8b274b465da', None),
    'replenish_outage [retry=False] random': ('3cd47655bff96c87', 0),
    'replenish_outage [retry=False] preemptions=0': ('067993701b08eaa1', 2),
    'replenish_outage [retry=False] pct': ('921d7b6af3d0ce9b', 0),
    'replenish_outage [retry=False] swarm': ('d8e0ec24f73843f9', 1),
    'replenish_price [default] random': ('c714e464044b0e86', None),
    'replenish_price [default] preemptions=0': ('625d209d88f2ccdd', None),
    'replenish_price [default] pct': ('2899707250ab4d99', None),
    'replenish_price [default] swarm': ('40fc25bda4cbbe54', None),
    'replenish_price [price_cap=False] random': ('5ebad616eca3fea2', 0),
    'replenish_price [price_cap=False] preemptions=0': ('d656d401ef80875c', 2),
    'replenish_price [price_cap=False] pct': ('2c4151a0bfbda753', 0),
    'replenish_price [price_cap=False] swarm': ('c4c39fd861397e8e', 1),
    'replenish_unreachable [default] random': ('4b1a470a4e595732', None),
    'replenish_unreachable [default] preemptions=0': ('8b784d9760d0b4aa', None),
    'replenish_unreachable [default] pct': ('b7b454d893de634c', None),
    'replenish_unreachable [default] swarm': ('dd7cfe3406de1a4f', None),
    'replenish_unreachable [unknown_kept=False] random': ('65fb81a96595b691', 0),
    'replenish_unreachable [unknown_kept=False] preemptions=0': ('972b08d886e10f58', 0),
    'replenish_unreachable [unknown_kept=False] pct': ('46559b2c6da8dc4f', 0),
    'replenish_unreachable [unknown_kept=False] swarm': ('c876c99bd43f413e', 0),
    'replenish_untrusted [default] random': ('c119db57ed233e94', None),
    'replenish_untrusted [default] preemptions=0': ('f3fde9c071e6b90d', None),
    'replenish_untrusted [default] pct': ('882ebe1aba36b0fa', None),
    'replenish_untrusted [default] swarm': ('6c52c20d0556500c', None),
    'replenish_untrusted [trust_email=True] random': ('3bdf4feae08b6071', 0),
    'replenish_untrusted [trust_email=True] preemptions=0': ('2a804dc22d76dcfb', 4),
    'replenish_untrusted [trust_email=True] pct': ('41eb67bab1b02e8b', 0),
    'replenish_untrusted [trust_email=True] swarm': ('ed1015491d8b230b', 3),
}


def _configs(scenario: Scenario) -> list[tuple[str, dict[str, Any]]]:
    configs = [("default", scenario.config())]
    for bug in scenario.planted_bugs:
        label = " ".join(f"{k}={v}" for k, v in bug.config.items())
        configs.append((label, scenario.config(
            {k: str(v).lower() if isinstance(v, bool) else str(v)
             for k, v in bug.config.items()})))
    return configs


def digest(scenario: Scenario, config: dict[str, Any], spec: str) -> tuple[str, int | None]:
    """The digest of ``SEEDS`` runs' records and footers, and the first failing seed."""
    h = hashlib.sha256()
    first: list[int] = []

    def keep(r: RunResult) -> None:
        trace = r.trace()
        h.update("\n".join(trace.record_lines()).encode())
        h.update(json.dumps(trace.footer, sort_keys=True).encode())
        if r.violated and not first:
            first.append(r.seed)

    if spec == "preemptions=0":
        plan = dataclasses.replace(scenario.fault_plan(config), preemptions=0)
        run_seeds(scenario, config, range(SEEDS), keep, faults=plan)
    else:
        how = explore(spec, scenario, config)
        run_seeds(scenario, config, range(SEEDS), keep, strategy=how.strategy, plan=how.plan)
    return h.hexdigest()[:16], (first[0] if first else None)


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_traces_of_every_config_and_strategy_are_unchanged(name: str) -> None:
    scenario = load(name)
    seen = {f"{name} [{label}] {spec}": digest(scenario, config, spec)
            for label, config in _configs(scenario) for spec in SPECS}
    if os.environ.get("DST_PRINT_DIGESTS"):
        print()
        for key, value in seen.items():
            line = f"    {key!r}: {value!r},"
            print(line if len(line) <= 100 else f"    {key!r}:\n        {value!r},")
    pinned = {key: value for key, value in PINNED.items() if key.startswith(f"{name} [")}
    changed = sorted(key for key in seen if seen[key] != pinned.get(key))
    assert changed == [], f"traces changed (or not pinned): {changed}"
