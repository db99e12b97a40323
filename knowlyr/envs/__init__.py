"""Built-in environments, registered under ``knowlyr/*`` when ``knowlyr`` is imported.

Registration uses ``"module:Class"`` entry points, so importing this package starts nothing.

=======================  ==========================================  ==========================
id                       class                                       tools
=======================  ==========================================  ==========================
knowlyr/sandbox          knowlyr.envs.sandbox_env:SandboxEnv         read_file, write_file,
                                                                     edit_file, bash, grep, git,
                                                                     think, submit
knowlyr/engineering      knowlyr.envs.engineering:EngineeringEnv     read_file, grep, git,
                                                                     knowledge_base, bash, respond
knowlyr/conversation     knowlyr.envs.conversation:ConversationEnv   query_stats, web_search,
                                                                     send_message, respond
knowlyr/advisory         knowlyr.envs.conversation:AdvisoryEnv       knowledge_base, web_search,
                                                                     create_note, respond
knowlyr/discussion       knowlyr.envs.conversation:DiscussionEnv     knowledge_base, think,
                                                                     respond
knowlyr/browser          knowlyr.browser.env:BrowserEnv              navigate, click, type_text,
                                                                     scroll, screenshot,
                                                                     read_page, submit
=======================  ==========================================  ==========================

Every env takes ``family=``, ``split=``, ``tasks=`` (see :class:`knowlyr.envs.base.TaskEnv`);
the sandboxed ones also ``sandbox=`` (a ``SandboxConfig`` or a dict of its fields).
"""

from __future__ import annotations

from knowlyr.core.registry import register
from knowlyr.taskset import register_suite

register(
    "knowlyr/sandbox",
    "knowlyr.envs.sandbox_env:SandboxEnv",
    max_steps=30,
    description="Coding tasks in a sandbox; hidden tests run after submit decide the outcome.",
)
register(
    "knowlyr/engineering",
    "knowlyr.envs.engineering:EngineeringEnv",
    max_steps=15,
    description="Questions about a repository (in a sandbox) and a team knowledge base.",
)
register(
    "knowlyr/conversation",
    "knowlyr.envs.conversation:ConversationEnv",
    max_steps=10,
    description="Customer service over a seeded order/account database (query, act, respond).",
)
register(
    "knowlyr/advisory",
    "knowlyr.envs.conversation:AdvisoryEnv",
    max_steps=10,
    description="Grounded advice from a knowledge base; notes and a checked answer.",
)
register(
    "knowlyr/discussion",
    "knowlyr.envs.conversation:DiscussionEnv",
    max_steps=10,
    description="Take a position grounded in a policy and the facts it applies to.",
)
register(
    "knowlyr/browser",
    "knowlyr.browser.env:BrowserEnv",
    max_steps=30,
    description="Web tasks on local sites (shop, docs wiki, admin panel) in a headless Chromium.",
)
register_suite("browser", "knowlyr.browser.suite:BrowserSuite")
