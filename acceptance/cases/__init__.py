"""The executable case catalogue (DESIGN §6). Each test is a refusal or a control of one case."""
