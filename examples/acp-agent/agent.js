#!/usr/bin/env node
// A minimal Agent Client Protocol agent in plain Node.js (no dependencies): JSON-RPC 2.0, one
// message per line, over stdin/stdout. It asks an OpenAI-compatible Chat Completions endpoint
// (OPENAI_BASE_URL, OPENAI_API_KEY; under tether: the model gateway and a capability token) for
// each turn, and has two tools, read_file and write_file, which it carries out through the
// client's fs/read_text_file and fs/write_text_file (under tether: confined to the workspace
// by the parent). session/cancel aborts the model call in flight and ends the turn `cancelled`.
//
//   OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 OPENAI_API_KEY=TOKEN node agent.js
"use strict";

const readline = require("node:readline");

const BASE = (process.env.OPENAI_BASE_URL || "http://127.0.0.1:8000/v1").replace(/\/$/, "");
const KEY = process.env.OPENAI_API_KEY || "";
const MODEL = process.env.ACP_AGENT_MODEL || "default";
const MAX_TURNS = 10;

const TOOLS = [
  {
    type: "function",
    function: {
      name: "write_file",
      description: "Create or replace a text file. The path is absolute.",
      parameters: {
        type: "object",
        properties: { path: { type: "string" }, content: { type: "string" } },
        required: ["path", "content"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "read_file",
      description: "Read a text file. The path is absolute.",
      parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
    },
  },
];

let nextId = 1;
const pending = new Map();
let clientCapabilities = {};
let session = null;
let inFlight = null;
let cancelled = false;

function send(message) {
  process.stdout.write(JSON.stringify({ jsonrpc: "2.0", ...message }) + "\n");
}

function request(method, params) {
  const id = nextId++;
  send({ id, method, params });
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}

function update(sessionUpdate) {
  send({ method: "session/update", params: { sessionId: session.id, update: sessionUpdate } });
}

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  if (!line.trim()) return;
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    return;
  }
  if (typeof message.method === "string") {
    handle(message);
  } else if (pending.has(message.id)) {
    const { resolve, reject } = pending.get(message.id);
    pending.delete(message.id);
    if (message.error) reject(message.error);
    else resolve(message.result);
  }
}).on("close", () => process.exit(0));

async function handle(message) {
  try {
    const result = await dispatch(message.method, message.params || {});
    if (message.id !== undefined) send({ id: message.id, result: result ?? null });
  } catch (err) {
    if (message.id !== undefined) {
      send({ id: message.id, error: { code: err.code || -32603, message: String(err.message || err) } });
    }
  }
}

async function dispatch(method, params) {
  switch (method) {
    case "initialize":
      clientCapabilities = params.clientCapabilities || {};
      return {
        protocolVersion: 1,
        agentCapabilities: {},
        agentInfo: { name: "tether-example-node-agent", version: "1.0.0" },
        authMethods: [],
      };
    case "session/new":
      session = { id: `session-${process.pid}`, cwd: params.cwd };
      return { sessionId: session.id };
    case "session/prompt":
      return prompt(params);
    case "session/cancel":
      cancelled = true;
      if (inFlight) inFlight.abort();
      return undefined;
    default:
      throw Object.assign(new Error(`method not found: ${method}`), { code: -32601 });
  }
}

async function prompt(params) {
  cancelled = false;
  const text = params.prompt.filter((b) => b.type === "text").map((b) => b.text).join("\n\n");
  const messages = [
    { role: "system", content: `You are a small coding agent working in ${session.cwd}.` },
    { role: "user", content: text },
  ];
  for (let turn = 1; turn <= MAX_TURNS; turn++) {
    let reply;
    try {
      reply = await complete(messages);
    } catch (err) {
      if (cancelled) return { stopReason: "cancelled" };
      throw err;
    }
    const message = reply.choices[0].message;
    if (message.content) {
      update({
        sessionUpdate: "agent_message_chunk",
        messageId: `turn-${turn}`,
        content: { type: "text", text: message.content },
      });
    }
    const calls = message.tool_calls || [];
    messages.push({ role: "assistant", content: message.content || null, ...(calls.length ? { tool_calls: calls } : {}) });
    if (calls.length === 0) return { stopReason: "end_turn" };
    for (const call of calls) {
      if (cancelled) return { stopReason: "cancelled" };
      messages.push({ role: "tool", tool_call_id: call.id, content: await runTool(call) });
    }
  }
  return { stopReason: "max_turn_requests" };
}

async function runTool(call) {
  const name = call.function.name;
  let args = {};
  try {
    args = JSON.parse(call.function.arguments || "{}");
  } catch {}
  update({
    sessionUpdate: "tool_call",
    toolCallId: call.id,
    title: `${name} ${args.path || ""}`.trim(),
    kind: name === "write_file" ? "edit" : "read",
    status: "in_progress",
    rawInput: args,
  });
  let output;
  let failed = false;
  try {
    if (name === "write_file") {
      if (!clientCapabilities.fs?.writeTextFile) throw new Error("the client does not write files");
      await request("fs/write_text_file", { sessionId: session.id, path: args.path, content: args.content });
      output = `wrote ${args.path}`;
    } else if (name === "read_file") {
      output = (await request("fs/read_text_file", { sessionId: session.id, path: args.path })).content;
    } else {
      throw new Error(`unknown tool ${name}`);
    }
  } catch (err) {
    failed = true;
    output = `error: ${err.message || JSON.stringify(err)}`;
  }
  update({
    sessionUpdate: "tool_call_update",
    toolCallId: call.id,
    status: failed ? "failed" : "completed",
    content: [{ type: "content", content: { type: "text", text: output } }],
  });
  return output;
}

async function complete(messages) {
  inFlight = new AbortController();
  try {
    const response = await fetch(`${BASE}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ model: MODEL, messages, tools: TOOLS }),
      signal: inFlight.signal,
    });
    const body = await response.json();
    if (!response.ok) throw new Error(`the model endpoint answered ${response.status}: ${body.error?.message}`);
    return body;
  } finally {
    inFlight = null;
  }
}
