"""Creating a response, whichever way it was asked for: ``POST /v1/responses`` or a ``response.create``
on the Responses WebSocket (``api/socket.py``). Everything a worker would refuse is refused here, before
anything is stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from oss_responses.api import conversations, jobs, limits, sealed
from oss_responses.api.auth import Owner
from oss_responses.api.queued import QueuedResponse, build_queued
from oss_responses.api.services import Services
from oss_responses.errors import BadRequest, NotFound
from oss_responses.logs import bind
from oss_responses.requests import CreateResponseRequest


@dataclass(frozen=True, slots=True)
class Accepted:
    queued: QueuedResponse
    opening: list[bytes]  # the frames the API wrote to the response's log: response.created (and queued)

    @property
    def response_id(self) -> str:
        return self.queued.response.id


def check_model(services: Services, model: str, owner: Owner) -> None:
    # A model the key may not use is reported exactly as one that is not served.
    if model not in owner.usable(services.settings.models):
        raise NotFound(f"The model '{model}' does not exist.", param="model", code="model_not_found")


def check_create(services: Services, body: CreateResponseRequest, owner: Owner) -> None:
    check_model(services, body.model, owner)
    limits.check_request_limits(services.settings, body)
    if body.background and not body.store:
        raise BadRequest("Background responses must be stored: store=false cannot be used with background=true.",
                         param="background", code="invalid_value")
    sealed.check_include(body, services.sealer)
    sealed.check_mcp_credentials(body, services.sealer)


async def plan_response(services: Services, body: CreateResponseRequest, owner: Owner) -> QueuedResponse:
    """The response ``body`` asks for, checked whole (its conversation planned), not yet stored."""
    check_create(services, body, owner)
    return await _planned(services, body, owner)


async def create(services: Services, body: CreateResponseRequest, owner: Owner) -> Accepted:
    """Check, store and enqueue the response ``body`` asks for, as ``owner``'s."""
    check_create(services, body, owner)
    await limits.check_queue_depth(services, body.model)
    queued = await _planned(services, body, owner)
    bind(response_id=queued.response.id, model=body.model)  # this request's later log lines are about it
    return Accepted(queued=queued, opening=await jobs.accept(services, queued, owner))


async def _planned(services: Services, body: CreateResponseRequest, owner: Owner) -> QueuedResponse:
    chain = await jobs.load_chain(services, body.previous_response_id, owner)
    prefix = await conversations.conversation_prefix(services, body, chain, owner)  # the owner's, or a 404
    if body.conversation is not None:  # its input joins the conversation once it ended
        await conversations.check_room(services, body.conversation, len(body.model_dump_json(include={"input"})),
                                       "conversation")
    plan = await jobs.check_conversation(services, body, chain, owner, prefix)
    through = prefix.through if prefix is not None and body.conversation is not None else None
    return build_queued(body, services.settings, plan, conversation_through=through)
