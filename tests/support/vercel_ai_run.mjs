// Runs of the Vercel AI SDK (ai, @ai-sdk/openai's Responses model) against the service; see js_clients.py.
// The scenario comes as JSON in JS_SCENARIO: {base_url, model, prompts, stream, tools, web_search, object,
// store, allowed_tools (tool names: the provider's allowedTools; a second tool, shout, is offered too),
// allowed_mode, tool_choice (a tool's name: toolChoice {type: 'tool', toolName}), code_interpreter,
// conversation (the turns happen in a conversation the service keeps: the provider's `conversation`)}.
// Each prompt is one turn; later turns send the earlier ones as messages, as a chat app does (with store
// on, the SDK names earlier output items by item_reference); in a conversation, each turn sends its own
// prompt only. Prints one JSON line: {texts, steps, object,
// hosted (the calls the service ran for the provider's tools, as the SDK saw them, when there were any)},
// or {error}.
import { createOpenAI } from '@ai-sdk/openai';
import { generateObject, generateText, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';

const scenario = JSON.parse(process.env.JS_SCENARIO);
const provider = createOpenAI({ baseURL: scenario.base_url, apiKey: 'unused' });
const model = provider.responses(scenario.model);
const providerOptions = { openai: { store: scenario.store ?? true } };
if (scenario.allowed_tools) {
  providerOptions.openai.allowedTools = { toolNames: scenario.allowed_tools, mode: scenario.allowed_mode ?? 'auto' };
}

const tools = {
  spell_backwards: tool({
    description: 'Spell a word backwards.',
    inputSchema: z.object({ word: z.string() }),
    execute: async ({ word }) => [...word].reverse().join(''),
  }),
};
const shout = tool({
  description: 'Shout a word.',
  inputSchema: z.object({ word: z.string() }),
  execute: async ({ word }) => word.toUpperCase(),
});

async function turn(messages) {
  const options = { model, messages, providerOptions, maxRetries: 0, stopWhen: stepCountIs(3) };
  if (scenario.tool_choice) options.toolChoice = { type: 'tool', toolName: scenario.tool_choice };
  options.tools = {
    ...(scenario.tools ? tools : {}),
    ...(scenario.allowed_tools ? { shout } : {}),
    ...(scenario.web_search ? { web_search: provider.tools.webSearch({}) } : {}),
    ...(scenario.code_interpreter ? { code_interpreter: provider.tools.codeInterpreter({}) } : {}),
  };
  if (!scenario.stream) return await generateText(options);
  let failure;
  const result = streamText({ ...options, onError: ({ error }) => { failure = error; } });
  await result.consumeStream();
  if (failure) throw failure;
  return { text: await result.text, steps: await result.steps, response: await result.response };
}

// The provider-executed tool calls and results of a turn's steps: [{tool, input} | {tool, output}].
function hostedCalls(steps) {
  return steps.flatMap((step) => step.content).filter((part) => part.providerExecuted)
    .map((part) => (part.type === 'tool-call' ? { tool: part.toolName, input: part.input }
      : { tool: part.toolName, output: part.output }));
}

// A conversation made as a chat app would, with a plain POST (the AI SDK makes none itself).
async function newConversation() {
  const reply = await fetch(`${scenario.base_url}/conversations`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}',
  });
  return (await reply.json()).id;
}

async function main() {
  if (scenario.conversation) providerOptions.openai.conversation = await newConversation();
  if (scenario.object) {
    const result = await generateObject({
      model, prompt: scenario.prompts[0], providerOptions, maxRetries: 0, schema: z.object({ spelling: z.string() }),
    });
    return { object: result.object };
  }
  const messages = [];
  const texts = [];
  const hosted = [];
  let steps = 0;
  for (const prompt of scenario.prompts) {
    if (scenario.conversation) messages.length = 0; // the service holds the earlier turns
    messages.push({ role: 'user', content: prompt });
    const result = await turn(messages);
    messages.push(...result.response.messages);
    texts.push(result.text);
    steps += result.steps.length;
    hosted.push(...hostedCalls(result.steps));
  }
  return hosted.length ? { texts, steps, hosted } : { texts, steps };
}

try {
  console.log(JSON.stringify(await main()));
} catch (error) {
  console.log(JSON.stringify({ error: String(error) }));
}
