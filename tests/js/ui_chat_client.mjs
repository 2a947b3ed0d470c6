// The AI SDK's own client against POST /api/ui/chat: DefaultChatTransport sends
// each request and reads the stream (its chunks checked by the SDK's schemas),
// readUIMessageStream assembles the assistant message. A first request asks;
// the approval asked for is answered as useChat's addToolApprovalResponse does
// (the tool part to state "approval-responded"), and the second request sends
// it. Prints what the client assembled, as JSON.
//
// Environment: UI_STREAM_MODULES (the folder whose node_modules holds "ai"),
// TURNFSM_URL, TURNFSM_TOKEN, CHAT_ID, PROMPT, DECISION ("approve" | "deny").
import { createRequire } from "node:module";
import { join } from "node:path";

const require = createRequire(join(process.env.UI_STREAM_MODULES, "package.json"));
const {
  DefaultChatTransport,
  readUIMessageStream,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} = require("ai");

const transport = new DefaultChatTransport({
  api: `${process.env.TURNFSM_URL}/api/ui/chat`,
  headers: { Authorization: `Bearer ${process.env.TURNFSM_TOKEN}` },
});
const chatId = process.env.CHAT_ID;

async function send(messages, trigger, messageId) {
  const stream = await transport.sendMessages({
    chatId,
    messages,
    trigger,
    messageId,
    abortSignal: undefined,
  });
  const last = messages[messages.length - 1];
  let message;
  for await (const m of readUIMessageStream({
    stream,
    message: last.role === "assistant" ? last : undefined,
    terminateOnError: true,
  })) {
    message = m;
  }
  return message;
}

const user = { id: "user-1", role: "user", parts: [{ type: "text", text: process.env.PROMPT }] };
const first = await send([user], "submit-message", undefined);
const approved = process.env.DECISION !== "deny";
const answered = {
  ...first,
  parts: first.parts.map((p) =>
    p.state === "approval-requested"
      ? {
          ...p,
          state: "approval-responded",
          approval: { ...p.approval, approved, reason: approved ? undefined : "not today" },
        }
      : p,
  ),
};
const wouldSend = lastAssistantMessageIsCompleteWithApprovalResponses({
  messages: [user, answered],
});
const second = await send([user, answered], "submit-message", answered.id);
process.stdout.write(JSON.stringify({ first, wouldSend, second }));
