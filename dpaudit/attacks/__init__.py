"""Membership-inference attacks."""

from dpaudit.attacks.shadow import AttackResult, ShadowAttackConfig, attack_run, shadow_attack

__all__ = ["AttackResult", "ShadowAttackConfig", "attack_run", "shadow_attack"]
