// A chat page on the AI SDK's client against turnfsm's POST /api/ui/chat: the
// SDK's DefaultChatTransport sends each request and reads the UI message
// stream; readUIMessageStream assembles the assistant message as it comes. A
// tool call that needs approval shows Approve / Deny buttons: the decision goes
// back in the tool part (state "approval-responded"), as useChat sends it.
import { DefaultChatTransport, readUIMessageStream } from "ai";

const api = new URL("/api/ui/chat", document.body.dataset.server).href;
const transport = new DefaultChatTransport({ api });
const chatId = `chat-${crypto.randomUUID()}`;
const messages = [];
const log = document.getElementById("log");
const form = document.getElementById("form");

function render() {
  log.replaceChildren(
    ...messages.map((m) => {
      const div = document.createElement("div");
      div.className = m.role;
      for (const part of m.parts) {
        if (part.type === "text") {
          div.append(Object.assign(document.createElement("p"), { textContent: part.text }));
        } else if (part.type === "dynamic-tool") {
          const p = document.createElement("pre");
          p.textContent = `${part.toolName}(${part.input ? JSON.stringify(part.input) : "…"}) ${part.state}`;
          if (part.state === "output-available") p.textContent += ` → ${JSON.stringify(part.output)}`;
          div.append(p);
          if (part.state === "approval-requested") {
            for (const approved of [true, false]) {
              const b = document.createElement("button");
              b.textContent = approved ? "Approve" : "Deny";
              b.onclick = () => decide(m, part, approved);
              div.append(b);
            }
          }
        }
      }
      return div;
    }),
  );
}

async function send(trigger, messageId) {
  const stream = await transport.sendMessages({ chatId, messages, trigger, messageId });
  const last = messages[messages.length - 1];
  const going = last.role === "assistant" ? last : undefined;
  for await (const message of readUIMessageStream({ stream, message: going })) {
    if (messages[messages.length - 1].id === message.id) messages[messages.length - 1] = message;
    else messages.push(message);
    render();
  }
}

function decide(message, part, approved) {
  part.state = "approval-responded";
  part.approval = { ...part.approval, approved };
  render();
  send("submit-message", message.id);
}

form.onsubmit = (e) => {
  e.preventDefault();
  const text = form.elements.text.value.trim();
  if (!text) return;
  form.elements.text.value = "";
  messages.push({ id: crypto.randomUUID(), role: "user", parts: [{ type: "text", text }] });
  render();
  send("submit-message", undefined);
};
