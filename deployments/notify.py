"""Failure notifications, off by default: a webhook notification block and an automation that
posts to it whenever a knowlyr flow run (tag ``knowlyr``) fails or crashes.

Nothing is sent until you turn it on against your server::

    make notify URL=https://hooks.slack.com/services/T000/B000/XXXX
    python -m deployments.notify --url https://example.com/hook      # the same
    python -m deployments.notify --off                                 # remove both again

The block is Prefect's ``CustomWebhookNotificationBlock`` (a JSON POST: ``{"text": subject +
body}``, the shape Slack and Mattermost incoming webhooks take; edit the block in the UI, Blocks
page, for another shape or a secret header). The automation is ``knowlyr-failures`` (Automations
page): trigger ``prefect.flow-run.Failed`` / ``prefect.flow-run.Crashed`` of a flow run tagged
``knowlyr``, action ``send-notification`` with the run's name, state, message and UI link.
"""

from __future__ import annotations

import argparse
import sys
from uuid import UUID

__all__ = ["NAME", "disable_failure_notifications", "enable_failure_notifications"]

NAME = "knowlyr-failures"
_BODY = (
    "Flow run {{ flow_run.name }} ended {{ flow_run.state.name }}: "
    "{{ flow_run.state.message }}\n{{ flow_run|ui_url }}"
)


def disable_failure_notifications(name: str = NAME) -> int:
    """Delete the automation(s) and the block called ``name``; returns how many were deleted."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    deleted = 0
    with get_client(sync_client=True) as client:
        for automation in client.read_automations_by_name(name):
            client.delete_automation(automation.id)
            deleted += 1
        try:
            block = client.read_block_document_by_name(name, "custom-webhook")
        except ObjectNotFound:
            return deleted
        client.delete_block_document(block.id)
    return deleted + 1


def enable_failure_notifications(url: str, *, name: str = NAME) -> UUID:
    """Save the webhook block ``name`` posting to ``url`` and (re)create the automation
    ``name`` that sends to it when a ``knowlyr``-tagged flow run fails or crashes; returns
    the automation's id."""
    from prefect.automations import Automation
    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.events.actions import SendNotification
    from prefect.events.schemas.automations import EventTrigger, Posture

    if not url.startswith(("http://", "https://")):
        raise ValueError(f"--url {url!r} is not an http(s) URL: pass the webhook to post to")
    disable_failure_notifications(name)
    block = CustomWebhookNotificationBlock(
        name=name, url=url, json_data={"text": "{{subject}}\n{{body}}"}
    )
    block_id = block.save(name, overwrite=True)
    automation = Automation(
        name=name,
        description="Posts to the knowlyr-failures webhook when a knowlyr flow run fails or crashes",
        trigger=EventTrigger(
            match={"prefect.resource.id": "prefect.flow-run.*"},
            match_related={
                "prefect.resource.role": "tag",
                "prefect.resource.id": "prefect.tag.knowlyr",
            },
            expect={"prefect.flow-run.Failed", "prefect.flow-run.Crashed"},
            posture=Posture.Reactive,
            threshold=1,
        ),
        actions=[
            SendNotification(
                block_document_id=block_id,
                subject="knowlyr: {{ flow_run.name }} {{ flow_run.state.name }}",
                body=_BODY,
            )
        ],
    ).create()
    return automation.id


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Turn knowlyr's failure notifications on or off.")
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--url", help="the webhook to POST {'text': ...} to")
    group.add_argument("--off", action="store_true", help="remove the automation and block")
    ap.add_argument("--name", default=NAME, help=f"automation and block name (default {NAME})")
    args = ap.parse_args(argv)
    if args.off:
        print(f"removed {disable_failure_notifications(args.name)} objects named {args.name}")
    else:
        automation = enable_failure_notifications(args.url, name=args.name)
        print(f"automation {args.name} ({automation}) posts failed / crashed runs to {args.url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
