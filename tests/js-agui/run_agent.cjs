// Drives a turnfsm server's POST /ag-ui with AG-UI's own client, unmodified.
//
// Usage: node run_agent.cjs < plan.json, where the plan is
//   {"modules": DIR, "url": URL, "token": TOKEN, "threadId": ID,
//    "steps": [{"user": TEXT} | {"resume": {"approved": BOOL, "reason": TEXT}}
//              | {"toolResults": {CALL_ID: TEXT}}]}
// where a step may also give "tools", the frontend tools its run declares.
// and DIR holds the node_modules that `npm ci` installed from this folder's
// package-lock.json. One HttpAgent runs every step (so each run resends the
// conversation the client assembled). Prints one JSON document: per run what
// the subscribers saw, and the agent's messages at the end.
"use strict";

const path = require("path");

function readStdin() {
  return new Promise((resolve, reject) => {
    let text = "";
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", (piece) => (text += piece));
    process.stdin.on("end", () => resolve(text));
    process.stdin.on("error", reject);
  });
}

async function main() {
  const plan = JSON.parse(await readStdin());
  const { HttpAgent, randomUUID } = require(path.join(plan.modules, "node_modules", "@ag-ui", "client"));
  const agent = new HttpAgent({
    url: plan.url,
    threadId: plan.threadId,
    headers: { Authorization: `Bearer ${plan.token}` },
  });
  const runs = [];
  for (const step of plan.steps) {
    const seen = {
      types: [],
      steps: [],
      text: {},
      toolCalls: [],
      argPieces: {},
      results: [],
      finished: null,
      error: null,
    };
    const parameters = { tools: step.tools ?? [] };
    if (step.user !== undefined) {
      agent.addMessage({ id: randomUUID(), role: "user", content: step.user });
    } else if (step.toolResults !== undefined) {
      for (const [toolCallId, content] of Object.entries(step.toolResults)) {
        agent.addMessage({ id: randomUUID(), role: "tool", toolCallId, content });
      }
    } else {
      parameters.resume = agent.pendingInterrupts.map((interrupt) => ({
        interruptId: interrupt.id,
        status: "resolved",
        payload: step.resume,
      }));
    }
    const subscriber = {
      onEvent: ({ event }) => {
        seen.types.push(event.type);
      },
      onStepStartedEvent: ({ event }) => {
        seen.steps.push(event.stepName);
      },
      onTextMessageEndEvent: ({ event, textMessageBuffer }) => {
        seen.text[event.messageId] = textMessageBuffer;
      },
      onToolCallArgsEvent: ({ event }) => {
        (seen.argPieces[event.toolCallId] ??= []).push(event.delta);
      },
      onToolCallEndEvent: ({ event, toolCallName, toolCallArgs }) => {
        seen.toolCalls.push({ id: event.toolCallId, name: toolCallName, args: toolCallArgs });
      },
      onToolCallResultEvent: ({ event }) => {
        seen.results.push({ toolCallId: event.toolCallId, content: event.content });
      },
      onRunFinishedEvent: ({ outcome, interrupts, result, pendingToolCallIds }) => {
        seen.finished = {
          outcome,
          interrupts: interrupts ?? [],
          pendingToolCallIds: pendingToolCallIds ?? [],
          result: result ?? null,
        };
      },
      onRunErrorEvent: ({ event }) => {
        seen.error = { message: event.message, code: event.code ?? null };
      },
    };
    try {
      await agent.runAgent(parameters, subscriber);
    } catch (err) {
      seen.error = seen.error ?? { message: String(err), code: "client" };
    }
    runs.push(seen);
  }
  process.stdout.write(JSON.stringify({ runs, messages: agent.messages }) + "\n");
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
  process.exit(1);
});
