"""Skills: folders of instructions under `workspace/skills/` that the model or the user switches on."""
