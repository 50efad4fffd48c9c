package com.arbi.example;

import com.arbi.v1.AdminServiceGrpc;
import com.arbi.v1.ChatInput;
import com.arbi.v1.ChatMessage;
import com.arbi.v1.GenerateRequest;
import com.arbi.v1.GenerateResponse;
import com.arbi.v1.GenerateServiceGrpc;
import com.arbi.v1.GetServerInfoRequest;
import com.arbi.v1.GetServerInfoResponse;
import com.arbi.v1.ModelInfo;
import com.arbi.v1.SamplingParameters;
import com.arbi.v1.StoppingCriteria;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.AbstractStub;
import io.grpc.stub.MetadataUtils;
import java.util.Iterator;
import java.util.concurrent.TimeUnit;

/**
 * Streams one greedy chat completion from an arbi-serve server, then prints the server's description
 * from the admin API.
 *
 * <p>Usage: {@code ARBI_ADMIN_TOKEN=... java -jar example.jar HOST:PORT}. ARBI_GENERATE_TOKEN is sent
 * with the generate call when the server requires one.
 */
public final class Example {
  private static final String QUESTION = "What is the capital of France?";
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private Example() {}

  /** The stub with a two-minute deadline and, for a non-empty token, the bearer credential. */
  static <S extends AbstractStub<S>> S prepare(S stub, String token) {
    S prepared = stub.withDeadlineAfter(2, TimeUnit.MINUTES);
    if (token.isEmpty()) {
      return prepared;
    }
    Metadata headers = new Metadata();
    headers.put(AUTHORIZATION, "Bearer " + token);
    return prepared.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(headers));
  }

  /** Prints the answer to QUESTION as it streams, then the finish reason and token usage. */
  static void streamChat(GenerateServiceGrpc.GenerateServiceBlockingStub stub) {
    GenerateRequest request =
        GenerateRequest.newBuilder()
            .setChat(
                ChatInput.newBuilder()
                    .addMessages(ChatMessage.newBuilder().setRole("user").setContent(QUESTION)))
            .setSampling(SamplingParameters.newBuilder().setTemperature(0.0f))
            .setStopping(StoppingCriteria.newBuilder().setMaxOutputTokens(32))
            .build();
    Iterator<GenerateResponse> stream = stub.generate(request);
    while (stream.hasNext()) {
      GenerateResponse response = stream.next();
      System.out.print(response.getText());
      System.out.flush();
      if (response.hasUsage()) {
        System.out.printf(
            "%nfinish: %s, prompt tokens: %d, output tokens: %d%n",
            response.getFinishReason(),
            response.getUsage().getPromptTokenCount(),
            response.getUsage().getOutputTokenCount());
      }
    }
  }

  /** Prints what the server is and serves. */
  static void printServerInfo(AdminServiceGrpc.AdminServiceBlockingStub stub) {
    GetServerInfoResponse info = stub.getServerInfo(GetServerInfoRequest.getDefaultInstance());
    ModelInfo model = info.getModel();
    System.out.printf(
        "server: arbi-serve %s, model %s (%s, %d context tokens), backend %s on %s, kv codec %s%n",
        info.getVersion(),
        model.getName(),
        model.getArchitecture(),
        model.getMaxContextTokens(),
        info.getBackend(),
        info.getDevice(),
        info.getKvCodec());
  }

  private static String env(String name) {
    String value = System.getenv(name);
    return value == null ? "" : value;
  }

  public static void main(String[] args) throws InterruptedException {
    if (args.length != 1) {
      System.err.println("usage: ARBI_ADMIN_TOKEN=... java -jar example.jar HOST:PORT");
      System.exit(2);
    }
    String adminToken = env("ARBI_ADMIN_TOKEN");
    if (adminToken.isEmpty()) {
      System.err.println(
          "error: ARBI_ADMIN_TOKEN is not set (the server mints it into the admin-token file of its"
              + " cache directory)");
      System.exit(2);
    }
    ManagedChannel channel = ManagedChannelBuilder.forTarget(args[0]).usePlaintext().build();
    try {
      streamChat(prepare(GenerateServiceGrpc.newBlockingStub(channel), env("ARBI_GENERATE_TOKEN")));
      printServerInfo(prepare(AdminServiceGrpc.newBlockingStub(channel), adminToken));
    } catch (StatusRuntimeException e) {
      System.err.println("error: " + e.getStatus());
      System.exit(1);
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }
}
