// One run of the Agents SDK for JavaScript (@openai/agents) against the service; see js_clients.py.
// The scenario comes as JSON in JS_SCENARIO: {base_url, model, input, stream, tools, handoff,
// output_type, code_interpreter, follow_up (a second turn: the first's history and this user message),
// memory (the history the second turn gets instead: "session", an OpenAIConversationsSession, or
// "conversation_id", a conversation the service keeps), transport ("http" | "websocket")}. Prints one JSON line: {final_output, last_agent, events, items,
// hosted (the hosted tool calls: name, code, status), follow_up_output}, or {error, issues}.
import {
  Agent, OpenAIConversationsSession, OpenAIResponsesModel, OpenAIResponsesWSModel, codeInterpreterTool, run,
  setTracingDisabled, tool,
} from '@openai/agents';
import OpenAI from 'openai';
import { z } from 'zod';

setTracingDisabled(true); // tracing would upload to OpenAI

const scenario = JSON.parse(process.env.JS_SCENARIO);
const client = new OpenAI({ baseURL: scenario.base_url, apiKey: 'unused', maxRetries: 0, timeout: 30_000 });
const model = scenario.transport === 'websocket'
  ? new OpenAIResponsesWSModel(client, scenario.model)
  : new OpenAIResponsesModel(client, scenario.model);

const spellBackwards = tool({
  name: 'spell_backwards',
  description: 'Spell a word backwards.',
  parameters: z.object({ word: z.string() }),
  execute: async ({ word }) => [...word].reverse().join(''),
});

function agent() {
  const settings = { name: 'speller', model, tools: scenario.tools ? [spellBackwards] : [] };
  if (scenario.code_interpreter) settings.tools.push(codeInterpreterTool());
  if (scenario.output_type) settings.outputType = z.object({ spelling: z.string() });
  if (scenario.handoff) settings.handoffs = [new Agent({ name: 'helper', model })];
  return new Agent(settings);
}

// The run options that carry the conversation from one turn to the next, per scenario.memory.
async function memory() {
  if (scenario.memory === 'session') return { session: new OpenAIConversationsSession({ client }) };
  if (scenario.memory === 'conversation_id') return { conversationId: (await client.conversations.create({})).id };
  return {};
}

async function main() {
  let result;
  let events = 0;
  const kept = await memory();
  if (scenario.stream) {
    result = await run(agent(), scenario.input, { stream: true, ...kept });
    for await (const _ of result) events += 1;
    await result.completed;
  } else {
    result = await run(agent(), scenario.input, kept);
  }
  const hosted = result.newItems.filter((item) => item.rawItem?.type === 'hosted_tool_call')
    .map(({ rawItem }) => ({ name: rawItem.name, code: rawItem.providerData?.code, status: rawItem.status }));
  const answer = {
    final_output: result.finalOutput,
    last_agent: result.lastAgent?.name,
    events,
    items: result.newItems.map((item) => item.type),
    ...(hosted.length ? { hosted } : {}),
  };
  if (scenario.follow_up && scenario.memory) {
    answer.follow_up_output = (await run(agent(), scenario.follow_up, kept)).finalOutput;
  } else if (scenario.follow_up) {
    const next = await run(agent(), [...result.history, { role: 'user', content: scenario.follow_up }]);
    answer.follow_up_output = next.finalOutput;
  }
  return answer;
}

try {
  console.log(JSON.stringify(await main()));
} catch (error) {
  // zod's issues say which field of the service's answer the SDK refused.
  console.log(JSON.stringify({ error: String(error), issues: error.issues ?? null }));
} finally {
  await model.close?.(); // the websocket model's connection would keep node running
}
