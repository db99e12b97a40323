"""``tests/slow-conversation``: the conversation env with a pause in every step, so a test can
kill its server (or a worker) while an episode is in the middle of a step.

Env servers load it with ``knowlyr env serve tests/slow-conversation --import tests.envs.slow_env``.
"""

from __future__ import annotations

import time

from knowlyr.core import register
from knowlyr.envs.conversation import ConversationEnv


class SlowConversationEnv(ConversationEnv):
    """ConversationEnv whose steps each take ``delay_s`` longer."""

    def __init__(self, *, delay_s: float = 0.3, **kwargs):
        super().__init__(**kwargs)
        self.delay_s = delay_s

    def step(self, action):
        time.sleep(self.delay_s)
        return super().step(action)


register("tests/slow-conversation", SlowConversationEnv, max_steps=10)
