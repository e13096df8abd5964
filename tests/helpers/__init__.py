"""What the tests share: rig and problem factories, file writers, the CLI runner, tiers."""
