package com.arbi.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * GenerateService produces text from the resident language model.
 * Every error is a `google.rpc.Status` with a canonical code, carried in the standard
 * `grpc-status-details-bin` trailer. Its details hold a `google.rpc.ErrorInfo` (domain "arbi-serve",
 * `reason` an UPPER_SNAKE_CASE constant such as QUEUE_FULL) and, for INVALID_ARGUMENT, a
 * `google.rpc.BadRequest` naming the offending field. When the server is started with a generate token,
 * every RPC here needs the metadata `authorization: Bearer &lt;token&gt;` (the admin token is accepted too);
 * without it they fail with UNAUTHENTICATED.
 * </pre>
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: arbi/v1/generate_service.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class GenerateServiceGrpc {

  private GenerateServiceGrpc() {}

  public static final String SERVICE_NAME = "arbi.v1.GenerateService";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.GenerateRequest,
      com.arbi.v1.GenerateResponse> getGenerateMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Generate",
      requestType = com.arbi.v1.GenerateRequest.class,
      responseType = com.arbi.v1.GenerateResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
  public static io.grpc.MethodDescriptor<com.arbi.v1.GenerateRequest,
      com.arbi.v1.GenerateResponse> getGenerateMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.GenerateRequest, com.arbi.v1.GenerateResponse> getGenerateMethod;
    if ((getGenerateMethod = GenerateServiceGrpc.getGenerateMethod) == null) {
      synchronized (GenerateServiceGrpc.class) {
        if ((getGenerateMethod = GenerateServiceGrpc.getGenerateMethod) == null) {
          GenerateServiceGrpc.getGenerateMethod = getGenerateMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.GenerateRequest, com.arbi.v1.GenerateResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Generate"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.GenerateRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.GenerateResponse.getDefaultInstance()))
              .setSchemaDescriptor(new GenerateServiceMethodDescriptorSupplier("Generate"))
              .build();
        }
      }
    }
    return getGenerateMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.SessionRequest,
      com.arbi.v1.SessionResponse> getSessionMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Session",
      requestType = com.arbi.v1.SessionRequest.class,
      responseType = com.arbi.v1.SessionResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
  public static io.grpc.MethodDescriptor<com.arbi.v1.SessionRequest,
      com.arbi.v1.SessionResponse> getSessionMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.SessionRequest, com.arbi.v1.SessionResponse> getSessionMethod;
    if ((getSessionMethod = GenerateServiceGrpc.getSessionMethod) == null) {
      synchronized (GenerateServiceGrpc.class) {
        if ((getSessionMethod = GenerateServiceGrpc.getSessionMethod) == null) {
          GenerateServiceGrpc.getSessionMethod = getSessionMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.SessionRequest, com.arbi.v1.SessionResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Session"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.SessionRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.SessionResponse.getDefaultInstance()))
              .setSchemaDescriptor(new GenerateServiceMethodDescriptorSupplier("Session"))
              .build();
        }
      }
    }
    return getSessionMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.TokenizeRequest,
      com.arbi.v1.TokenizeResponse> getTokenizeMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Tokenize",
      requestType = com.arbi.v1.TokenizeRequest.class,
      responseType = com.arbi.v1.TokenizeResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.TokenizeRequest,
      com.arbi.v1.TokenizeResponse> getTokenizeMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.TokenizeRequest, com.arbi.v1.TokenizeResponse> getTokenizeMethod;
    if ((getTokenizeMethod = GenerateServiceGrpc.getTokenizeMethod) == null) {
      synchronized (GenerateServiceGrpc.class) {
        if ((getTokenizeMethod = GenerateServiceGrpc.getTokenizeMethod) == null) {
          GenerateServiceGrpc.getTokenizeMethod = getTokenizeMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.TokenizeRequest, com.arbi.v1.TokenizeResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Tokenize"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.TokenizeRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.TokenizeResponse.getDefaultInstance()))
              .setSchemaDescriptor(new GenerateServiceMethodDescriptorSupplier("Tokenize"))
              .build();
        }
      }
    }
    return getTokenizeMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.DetokenizeRequest,
      com.arbi.v1.DetokenizeResponse> getDetokenizeMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Detokenize",
      requestType = com.arbi.v1.DetokenizeRequest.class,
      responseType = com.arbi.v1.DetokenizeResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.DetokenizeRequest,
      com.arbi.v1.DetokenizeResponse> getDetokenizeMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.DetokenizeRequest, com.arbi.v1.DetokenizeResponse> getDetokenizeMethod;
    if ((getDetokenizeMethod = GenerateServiceGrpc.getDetokenizeMethod) == null) {
      synchronized (GenerateServiceGrpc.class) {
        if ((getDetokenizeMethod = GenerateServiceGrpc.getDetokenizeMethod) == null) {
          GenerateServiceGrpc.getDetokenizeMethod = getDetokenizeMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.DetokenizeRequest, com.arbi.v1.DetokenizeResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Detokenize"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.DetokenizeRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.DetokenizeResponse.getDefaultInstance()))
              .setSchemaDescriptor(new GenerateServiceMethodDescriptorSupplier("Detokenize"))
              .build();
        }
      }
    }
    return getDetokenizeMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.arbi.v1.CountTokensRequest,
      com.arbi.v1.CountTokensResponse> getCountTokensMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "CountTokens",
      requestType = com.arbi.v1.CountTokensRequest.class,
      responseType = com.arbi.v1.CountTokensResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.arbi.v1.CountTokensRequest,
      com.arbi.v1.CountTokensResponse> getCountTokensMethod() {
    io.grpc.MethodDescriptor<com.arbi.v1.CountTokensRequest, com.arbi.v1.CountTokensResponse> getCountTokensMethod;
    if ((getCountTokensMethod = GenerateServiceGrpc.getCountTokensMethod) == null) {
      synchronized (GenerateServiceGrpc.class) {
        if ((getCountTokensMethod = GenerateServiceGrpc.getCountTokensMethod) == null) {
          GenerateServiceGrpc.getCountTokensMethod = getCountTokensMethod =
              io.grpc.MethodDescriptor.<com.arbi.v1.CountTokensRequest, com.arbi.v1.CountTokensResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "CountTokens"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.CountTokensRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.arbi.v1.CountTokensResponse.getDefaultInstance()))
              .setSchemaDescriptor(new GenerateServiceMethodDescriptorSupplier("CountTokens"))
              .build();
        }
      }
    }
    return getCountTokensMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static GenerateServiceStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<GenerateServiceStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<GenerateServiceStub>() {
        @java.lang.Override
        public GenerateServiceStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new GenerateServiceStub(channel, callOptions);
        }
      };
    return GenerateServiceStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static GenerateServiceBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<GenerateServiceBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<GenerateServiceBlockingStub>() {
        @java.lang.Override
        public GenerateServiceBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new GenerateServiceBlockingStub(channel, callOptions);
        }
      };
    return GenerateServiceBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static GenerateServiceFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<GenerateServiceFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<GenerateServiceFutureStub>() {
        @java.lang.Override
        public GenerateServiceFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new GenerateServiceFutureStub(channel, callOptions);
        }
      };
    return GenerateServiceFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * GenerateService produces text from the resident language model.
   * Every error is a `google.rpc.Status` with a canonical code, carried in the standard
   * `grpc-status-details-bin` trailer. Its details hold a `google.rpc.ErrorInfo` (domain "arbi-serve",
   * `reason` an UPPER_SNAKE_CASE constant such as QUEUE_FULL) and, for INVALID_ARGUMENT, a
   * `google.rpc.BadRequest` naming the offending field. When the server is started with a generate token,
   * every RPC here needs the metadata `authorization: Bearer &lt;token&gt;` (the admin token is accepted too);
   * without it they fail with UNAUTHENTICATED.
   * </pre>
   */
  public static abstract class GenerateServiceImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Generate streams the completion of one input: one message per engine step, or several steps merged
     * into one message when the client reads slower than the engine produces (nothing is dropped).
     * Errors:
     * - INVALID_ARGUMENT: empty input, input longer than the model context, or a sampling or stopping
     *   parameter out of range; BadRequest names the field.
     * - NOT_FOUND: `model` names a model that is not resident.
     * - RESOURCE_EXHAUSTED: the server's waiting queue is full; retry later.
     * - UNAVAILABLE: the server is draining, has no resident model, is shutting down, or the resident
     *   model was switched before this request finished; retry (after a switch, on the new model).
     * - UNAUTHENTICATED: a generate token is configured and the call carries none or a wrong one.
     * - CANCELLED / DEADLINE_EXCEEDED: the client cancelled or its deadline passed; the request stops at
     *   the next engine step and its KV cache blocks are freed.
     * An administrator's cancel ends the stream normally with FINISH_REASON_CANCELLED.
     * </pre>
     */
    public void generate(com.arbi.v1.GenerateRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.GenerateResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGenerateMethod(), responseObserver);
    }

    /**
     * <pre>
     * Session carries many generations over one bidirectional stream. The client starts a generation with
     * a `start` message under an id of its choosing and may cancel it with a `cancel` message; the server
     * answers with messages tagged by that id, interleaved across generations. Each generation ends with
     * exactly one final message: an output with a finish reason (FINISH_REASON_CANCELLED after a cancel),
     * or an `error`. A failed generation never ends the stream; the others go on. When the client closes
     * its side, the server finishes the live generations and then closes the stream with OK.
     * Flow control: the server never buffers without bound. Each generation keeps at most one pending
     * message; while the client does not read, the outputs of further engine steps are merged into it
     * (tokens and text appended), so the buffer of a generation is bounded by its output length. HTTP/2
     * flow control holds the server's writes until the client reads, and a session holds at most
     * `max_session_generations` live generations (ServerLimits); a start beyond that is refused.
     * Per-generation errors (in `SessionResponse.error`, the stream stays open): the codes of Generate,
     * plus INVALID_ARGUMENT for an empty, over-long or already live `generation_id`, and
     * RESOURCE_EXHAUSTED when the session already holds `max_session_generations` live generations.
     * A cancel for an id that is not live is ignored (the generation may have just finished).
     * Stream errors (the whole stream ends, live generations are cancelled):
     * - INVALID_ARGUMENT: a client message sets neither `start` nor `cancel`.
     * - UNAUTHENTICATED: as for Generate.
     * - CANCELLED / DEADLINE_EXCEEDED: the client cancelled the stream or its deadline passed.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<com.arbi.v1.SessionRequest> session(
        io.grpc.stub.StreamObserver<com.arbi.v1.SessionResponse> responseObserver) {
      return io.grpc.stub.ServerCalls.asyncUnimplementedStreamingCall(getSessionMethod(), responseObserver);
    }

    /**
     * <pre>
     * Tokenize turns text or chat messages into the token ids Generate would feed the model (raw text
     * without special tokens; chat messages through the model's chat template). No context limit applies.
     * Errors:
     * - INVALID_ARGUMENT: no input set, or chat messages the template rejects; BadRequest names the field.
     * - NOT_FOUND: `model` names a model that is not resident.
     * - UNAVAILABLE: no model is resident.
     * - UNAUTHENTICATED: as for Generate.
     * </pre>
     */
    public void tokenize(com.arbi.v1.TokenizeRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.TokenizeResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getTokenizeMethod(), responseObserver);
    }

    /**
     * <pre>
     * Detokenize turns token ids back into text.
     * Errors:
     * - INVALID_ARGUMENT: a token id outside the vocabulary; BadRequest names `token_ids`.
     * - NOT_FOUND: `model` names a model that is not resident.
     * - UNAVAILABLE: no model is resident.
     * - UNAUTHENTICATED: as for Generate.
     * </pre>
     */
    public void detokenize(com.arbi.v1.DetokenizeRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.DetokenizeResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getDetokenizeMethod(), responseObserver);
    }

    /**
     * <pre>
     * CountTokens counts the tokens of an input as Generate would see it, and says how many tokens one
     * sequence may hold on this server, so a client can size `max_output_tokens` before generating.
     * Errors: as for Tokenize.
     * </pre>
     */
    public void countTokens(com.arbi.v1.CountTokensRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.CountTokensResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCountTokensMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getGenerateMethod(),
            io.grpc.stub.ServerCalls.asyncServerStreamingCall(
              new MethodHandlers<
                com.arbi.v1.GenerateRequest,
                com.arbi.v1.GenerateResponse>(
                  this, METHODID_GENERATE)))
          .addMethod(
            getSessionMethod(),
            io.grpc.stub.ServerCalls.asyncBidiStreamingCall(
              new MethodHandlers<
                com.arbi.v1.SessionRequest,
                com.arbi.v1.SessionResponse>(
                  this, METHODID_SESSION)))
          .addMethod(
            getTokenizeMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.TokenizeRequest,
                com.arbi.v1.TokenizeResponse>(
                  this, METHODID_TOKENIZE)))
          .addMethod(
            getDetokenizeMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.DetokenizeRequest,
                com.arbi.v1.DetokenizeResponse>(
                  this, METHODID_DETOKENIZE)))
          .addMethod(
            getCountTokensMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.arbi.v1.CountTokensRequest,
                com.arbi.v1.CountTokensResponse>(
                  this, METHODID_COUNT_TOKENS)))
          .build();
    }
  }

  /**
   * <pre>
   * GenerateService produces text from the resident language model.
   * Every error is a `google.rpc.Status` with a canonical code, carried in the standard
   * `grpc-status-details-bin` trailer. Its details hold a `google.rpc.ErrorInfo` (domain "arbi-serve",
   * `reason` an UPPER_SNAKE_CASE constant such as QUEUE_FULL) and, for INVALID_ARGUMENT, a
   * `google.rpc.BadRequest` naming the offending field. When the server is started with a generate token,
   * every RPC here needs the metadata `authorization: Bearer &lt;token&gt;` (the admin token is accepted too);
   * without it they fail with UNAUTHENTICATED.
   * </pre>
   */
  public static final class GenerateServiceStub extends io.grpc.stub.AbstractAsyncStub<GenerateServiceStub> {
    private GenerateServiceStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected GenerateServiceStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new GenerateServiceStub(channel, callOptions);
    }

    /**
     * <pre>
     * Generate streams the completion of one input: one message per engine step, or several steps merged
     * into one message when the client reads slower than the engine produces (nothing is dropped).
     * Errors:
     * - INVALID_ARGUMENT: empty input, input longer than the model context, or a sampling or stopping
     *   parameter out of range; BadRequest names the field.
     * - NOT_FOUND: `model` names a model that is not resident.
     * - RESOURCE_EXHAUSTED: the server's waiting queue is full; retry later.
     * - UNAVAILABLE: the server is draining, has no resident model, is shutting down, or the resident
     *   model was switched before this request finished; retry (after a switch, on the new model).
     * - UNAUTHENTICATED: a generate token is configured and the call carries none or a wrong one.
     * - CANCELLED / DEADLINE_EXCEEDED: the client cancelled or its deadline passed; the request stops at
     *   the next engine step and its KV cache blocks are freed.
     * An administrator's cancel ends the stream normally with FINISH_REASON_CANCELLED.
     * </pre>
     */
    public void generate(com.arbi.v1.GenerateRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.GenerateResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncServerStreamingCall(
          getChannel().newCall(getGenerateMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Session carries many generations over one bidirectional stream. The client starts a generation with
     * a `start` message under an id of its choosing and may cancel it with a `cancel` message; the server
     * answers with messages tagged by that id, interleaved across generations. Each generation ends with
     * exactly one final message: an output with a finish reason (FINISH_REASON_CANCELLED after a cancel),
     * or an `error`. A failed generation never ends the stream; the others go on. When the client closes
     * its side, the server finishes the live generations and then closes the stream with OK.
     * Flow control: the server never buffers without bound. Each generation keeps at most one pending
     * message; while the client does not read, the outputs of further engine steps are merged into it
     * (tokens and text appended), so the buffer of a generation is bounded by its output length. HTTP/2
     * flow control holds the server's writes until the client reads, and a session holds at most
     * `max_session_generations` live generations (ServerLimits); a start beyond that is refused.
     * Per-generation errors (in `SessionResponse.error`, the stream stays open): the codes of Generate,
     * plus INVALID_ARGUMENT for an empty, over-long or already live `generation_id`, and
     * RESOURCE_EXHAUSTED when the session already holds `max_session_generations` live generations.
     * A cancel for an id that is not live is ignored (the generation may have just finished).
     * Stream errors (the whole stream ends, live generations are cancelled):
     * - INVALID_ARGUMENT: a client message sets neither `start` nor `cancel`.
     * - UNAUTHENTICATED: as for Generate.
     * - CANCELLED / DEADLINE_EXCEEDED: the client cancelled the stream or its deadline passed.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<com.arbi.v1.SessionRequest> session(
        io.grpc.stub.StreamObserver<com.arbi.v1.SessionResponse> responseObserver) {
      return io.grpc.stub.ClientCalls.asyncBidiStreamingCall(
          getChannel().newCall(getSessionMethod(), getCallOptions()), responseObserver);
    }

    /**
     * <pre>
     * Tokenize turns text or chat messages into the token ids Generate would feed the model (raw text
     * without special tokens; chat messages through the model's chat template). No context limit applies.
     * Errors:
     * - INVALID_ARGUMENT: no input set, or chat messages the template rejects; BadRequest names the field.
     * - NOT_FOUND: `model` names a model that is not resident.
     * - UNAVAILABLE: no model is resident.
     * - UNAUTHENTICATED: as for Generate.
     * </pre>
     */
    public void tokenize(com.arbi.v1.TokenizeRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.TokenizeResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getTokenizeMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Detokenize turns token ids back into text.
     * Errors:
     * - INVALID_ARGUMENT: a token id outside the vocabulary; BadRequest names `token_ids`.
     * - NOT_FOUND: `model` names a model that is not resident.
     * - UNAVAILABLE: no model is resident.
     * - UNAUTHENTICATED: as for Generate.
     * </pre>
     */
    public void detokenize(com.arbi.v1.DetokenizeRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.DetokenizeResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getDetokenizeMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * CountTokens counts the tokens of an input as Generate would see it, and says how many tokens one
     * sequence may hold on this server, so a client can size `max_output_tokens` before generating.
     * Errors: as for Tokenize.
     * </pre>
     */
    public void countTokens(com.arbi.v1.CountTokensRequest request,
        io.grpc.stub.StreamObserver<com.arbi.v1.CountTokensResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCountTokensMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * <pre>
   * GenerateService produces text from the resident language model.
   * Every error is a `google.rpc.Status` with a canonical code, carried in the standard
   * `grpc-status-details-bin` trailer. Its details hold a `google.rpc.ErrorInfo` (domain "arbi-serve",
   * `reason` an UPPER_SNAKE_CASE constant such as QUEUE_FULL) and, for INVALID_ARGUMENT, a
   * `google.rpc.BadRequest` naming the offending field. When the server is started with a generate token,
   * every RPC here needs the metadata `authorization: Bearer &lt;token&gt;` (the admin token is accepted too);
   * without it they fail with UNAUTHENTICATED.
   * </pre>
   */
  public static final class GenerateServiceBlockingStub extends io.grpc.stub.AbstractBlockingStub<GenerateServiceBlockingStub> {
    private GenerateServiceBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected GenerateServiceBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new GenerateServiceBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Generate streams the completion of one input: one message per engine step, or several steps merged
     * into one message when the client reads slower than the engine produces (nothing is dropped).
     * Errors:
     * - INVALID_ARGUMENT: empty input, input longer than the model context, or a sampling or stopping
     *   parameter out of range; BadRequest names the field.
     * - NOT_FOUND: `model` names a model that is not resident.
     * - RESOURCE_EXHAUSTED: the server's waiting queue is full; retry later.
     * - UNAVAILABLE: the server is draining, has no resident model, is shutting down, or the resident
     *   model was switched before this request finished; retry (after a switch, on the new model).
     * - UNAUTHENTICATED: a generate token is configured and the call carries none or a wrong one.
     * - CANCELLED / DEADLINE_EXCEEDED: the client cancelled or its deadline passed; the request stops at
     *   the next engine step and its KV cache blocks are freed.
     * An administrator's cancel ends the stream normally with FINISH_REASON_CANCELLED.
     * </pre>
     */
    public java.util.Iterator<com.arbi.v1.GenerateResponse> generate(
        com.arbi.v1.GenerateRequest request) {
      return io.grpc.stub.ClientCalls.blockingServerStreamingCall(
          getChannel(), getGenerateMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Tokenize turns text or chat messages into the token ids Generate would feed the model (raw text
     * without special tokens; chat messages through the model's chat template). No context limit applies.
     * Errors:
     * - INVALID_ARGUMENT: no input set, or chat messages the template rejects; BadRequest names the field.
     * - NOT_FOUND: `model` names a model that is not resident.
     * - UNAVAILABLE: no model is resident.
     * - UNAUTHENTICATED: as for Generate.
     * </pre>
     */
    public com.arbi.v1.TokenizeResponse tokenize(com.arbi.v1.TokenizeRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getTokenizeMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Detokenize turns token ids back into text.
     * Errors:
     * - INVALID_ARGUMENT: a token id outside the vocabulary; BadRequest names `token_ids`.
     * - NOT_FOUND: `model` names a model that is not resident.
     * - UNAVAILABLE: no model is resident.
     * - UNAUTHENTICATED: as for Generate.
     * </pre>
     */
    public com.arbi.v1.DetokenizeResponse detokenize(com.arbi.v1.DetokenizeRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getDetokenizeMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * CountTokens counts the tokens of an input as Generate would see it, and says how many tokens one
     * sequence may hold on this server, so a client can size `max_output_tokens` before generating.
     * Errors: as for Tokenize.
     * </pre>
     */
    public com.arbi.v1.CountTokensResponse countTokens(com.arbi.v1.CountTokensRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCountTokensMethod(), getCallOptions(), request);
    }
  }

  /**
   * <pre>
   * GenerateService produces text from the resident language model.
   * Every error is a `google.rpc.Status` with a canonical code, carried in the standard
   * `grpc-status-details-bin` trailer. Its details hold a `google.rpc.ErrorInfo` (domain "arbi-serve",
   * `reason` an UPPER_SNAKE_CASE constant such as QUEUE_FULL) and, for INVALID_ARGUMENT, a
   * `google.rpc.BadRequest` naming the offending field. When the server is started with a generate token,
   * every RPC here needs the metadata `authorization: Bearer &lt;token&gt;` (the admin token is accepted too);
   * without it they fail with UNAUTHENTICATED.
   * </pre>
   */
  public static final class GenerateServiceFutureStub extends io.grpc.stub.AbstractFutureStub<GenerateServiceFutureStub> {
    private GenerateServiceFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected GenerateServiceFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new GenerateServiceFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Tokenize turns text or chat messages into the token ids Generate would feed the model (raw text
     * without special tokens; chat messages through the model's chat template). No context limit applies.
     * Errors:
     * - INVALID_ARGUMENT: no input set, or chat messages the template rejects; BadRequest names the field.
     * - NOT_FOUND: `model` names a model that is not resident.
     * - UNAVAILABLE: no model is resident.
     * - UNAUTHENTICATED: as for Generate.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.TokenizeResponse> tokenize(
        com.arbi.v1.TokenizeRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getTokenizeMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Detokenize turns token ids back into text.
     * Errors:
     * - INVALID_ARGUMENT: a token id outside the vocabulary; BadRequest names `token_ids`.
     * - NOT_FOUND: `model` names a model that is not resident.
     * - UNAVAILABLE: no model is resident.
     * - UNAUTHENTICATED: as for Generate.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.DetokenizeResponse> detokenize(
        com.arbi.v1.DetokenizeRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getDetokenizeMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * CountTokens counts the tokens of an input as Generate would see it, and says how many tokens one
     * sequence may hold on this server, so a client can size `max_output_tokens` before generating.
     * Errors: as for Tokenize.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.arbi.v1.CountTokensResponse> countTokens(
        com.arbi.v1.CountTokensRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCountTokensMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_GENERATE = 0;
  private static final int METHODID_TOKENIZE = 1;
  private static final int METHODID_DETOKENIZE = 2;
  private static final int METHODID_COUNT_TOKENS = 3;
  private static final int METHODID_SESSION = 4;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final GenerateServiceImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(GenerateServiceImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_GENERATE:
          serviceImpl.generate((com.arbi.v1.GenerateRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.GenerateResponse>) responseObserver);
          break;
        case METHODID_TOKENIZE:
          serviceImpl.tokenize((com.arbi.v1.TokenizeRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.TokenizeResponse>) responseObserver);
          break;
        case METHODID_DETOKENIZE:
          serviceImpl.detokenize((com.arbi.v1.DetokenizeRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.DetokenizeResponse>) responseObserver);
          break;
        case METHODID_COUNT_TOKENS:
          serviceImpl.countTokens((com.arbi.v1.CountTokensRequest) request,
              (io.grpc.stub.StreamObserver<com.arbi.v1.CountTokensResponse>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_SESSION:
          return (io.grpc.stub.StreamObserver<Req>) serviceImpl.session(
              (io.grpc.stub.StreamObserver<com.arbi.v1.SessionResponse>) responseObserver);
        default:
          throw new AssertionError();
      }
    }
  }

  private static abstract class GenerateServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    GenerateServiceBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return com.arbi.v1.GenerateServiceProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("GenerateService");
    }
  }

  private static final class GenerateServiceFileDescriptorSupplier
      extends GenerateServiceBaseDescriptorSupplier {
    GenerateServiceFileDescriptorSupplier() {}
  }

  private static final class GenerateServiceMethodDescriptorSupplier
      extends GenerateServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    GenerateServiceMethodDescriptorSupplier(String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (GenerateServiceGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new GenerateServiceFileDescriptorSupplier())
              .addMethod(getGenerateMethod())
              .addMethod(getSessionMethod())
              .addMethod(getTokenizeMethod())
              .addMethod(getDetokenizeMethod())
              .addMethod(getCountTokensMethod())
              .build();
        }
      }
    }
    return result;
  }
}
