// Streams one greedy chat completion from an arbi-serve server, then prints the server's description
// from the admin API.
//
// Usage: ARBI_ADMIN_TOKEN=... node dist/src/example.js HOST:PORT
// ARBI_GENERATE_TOKEN is sent with the generate call when the server requires one.

import { type CallOptions, credentials, Metadata, type ServiceError } from "@grpc/grpc-js";

import { AdminServiceClient, GetServerInfoRequest, type GetServerInfoResponse } from "../gen/arbi/v1/admin_service";
import { GenerateRequest, type GenerateResponse, GenerateServiceClient } from "../gen/arbi/v1/generate_service";
import { finishReasonToJSON } from "../gen/arbi/v1/generation_types";

const QUESTION = "What is the capital of France?";
const DEADLINE_MS = 120_000;

/** The metadata of one call: `authorization: Bearer <token>` for a non-empty token. */
function bearer(token: string): Metadata {
  const metadata = new Metadata();
  if (token !== "") {
    metadata.set("authorization", `Bearer ${token}`);
  }
  return metadata;
}

function callOptions(): Partial<CallOptions> {
  return { deadline: Date.now() + DEADLINE_MS };
}

/** Prints the answer to QUESTION as it streams, then the finish reason and token usage. */
async function streamChat(client: GenerateServiceClient, token: string): Promise<void> {
  const request = GenerateRequest.fromPartial({
    chat: { messages: [{ role: "user", content: QUESTION }] },
    sampling: { temperature: 0 },
    stopping: { maxOutputTokens: 32 },
  });
  const stream = client.generate(request, bearer(token), callOptions());
  for await (const response of stream as AsyncIterable<GenerateResponse>) {
    process.stdout.write(response.text);
    if (response.usage !== undefined) {
      const { promptTokenCount, outputTokenCount } = response.usage;
      const finish = finishReasonToJSON(response.finishReason);
      process.stdout.write(`\nfinish: ${finish}, prompt tokens: ${promptTokenCount}, output tokens: ${outputTokenCount}\n`);
    }
  }
}

/** Prints what the server is and serves. */
async function printServerInfo(client: AdminServiceClient, token: string): Promise<void> {
  const info = await new Promise<GetServerInfoResponse>((resolve, reject) => {
    client.getServerInfo(GetServerInfoRequest.fromPartial({}), bearer(token), callOptions(), (error, response) =>
      error === null ? resolve(response) : reject(error),
    );
  });
  const model = info.model;
  process.stdout.write(
    `server: arbi-serve ${info.version}, model ${model?.name} (${model?.architecture}, ` +
      `${model?.maxContextTokens} context tokens), backend ${info.backend} on ${info.device}, kv codec ${info.kvCodec}\n`,
  );
}

async function main(argv: string[]): Promise<number> {
  if (argv.length !== 1) {
    console.error("usage: ARBI_ADMIN_TOKEN=... node dist/src/example.js HOST:PORT");
    return 2;
  }
  const adminToken = process.env.ARBI_ADMIN_TOKEN ?? "";
  if (adminToken === "") {
    console.error("error: ARBI_ADMIN_TOKEN is not set (the server mints it into the admin-token file of its cache directory)");
    return 2;
  }
  const target = argv[0];
  const generate = new GenerateServiceClient(target, credentials.createInsecure());
  const admin = new AdminServiceClient(target, credentials.createInsecure());
  try {
    await streamChat(generate, process.env.ARBI_GENERATE_TOKEN ?? "");
    await printServerInfo(admin, adminToken);
    return 0;
  } catch (error) {
    const status = error as ServiceError;
    console.error(`error: code ${status.code}: ${status.details ?? status.message}`);
    return 1;
  } finally {
    generate.close();
    admin.close();
  }
}

main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
