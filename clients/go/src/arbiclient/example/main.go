// Command example streams one greedy chat completion from an arbi-serve server, then prints the
// server's description from the admin API.
//
// Usage: ARBI_ADMIN_TOKEN=... example HOST:PORT
// ARBI_GENERATE_TOKEN is sent with the generate call when the server requires one.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	arbiv1 "arbiclient/gen/arbi/v1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

const question = "What is the capital of France?"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: ARBI_ADMIN_TOKEN=... example HOST:PORT")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Getenv("ARBI_GENERATE_TOKEN"), os.Getenv("ARBI_ADMIN_TOKEN")); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(target, generateToken, adminToken string) error {
	if adminToken == "" {
		return errors.New("ARBI_ADMIN_TOKEN is not set (the server mints it into the admin-token file of its cache directory)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Plaintext; WithInsecure because Debian's grpc-go (1.33) predates the credentials/insecure package.
	conn, err := grpc.DialContext(ctx, target, grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		return fmt.Errorf("connect %s: %w", target, err)
	}
	defer conn.Close()
	if err := streamChat(withBearer(ctx, generateToken), arbiv1.NewGenerateServiceClient(conn)); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	if err := printServerInfo(withBearer(ctx, adminToken), arbiv1.NewAdminServiceClient(conn)); err != nil {
		return fmt.Errorf("server info: %w", err)
	}
	return nil
}

// withBearer attaches `authorization: Bearer <token>` to the calls made with ctx; an empty token adds nothing.
func withBearer(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// streamChat prints the answer to the question as it streams, then the finish reason and token usage.
func streamChat(ctx context.Context, client arbiv1.GenerateServiceClient) error {
	temperature := float32(0)
	maxOutputTokens := int32(32)
	stream, err := client.Generate(ctx, &arbiv1.GenerateRequest{
		Input: &arbiv1.GenerateRequest_Chat{Chat: &arbiv1.ChatInput{
			Messages: []*arbiv1.ChatMessage{{Role: "user", Content: question}},
		}},
		Sampling: &arbiv1.SamplingParameters{Temperature: &temperature},
		Stopping: &arbiv1.StoppingCriteria{MaxOutputTokens: &maxOutputTokens},
	})
	if err != nil {
		return err
	}
	for {
		response, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		fmt.Print(response.GetText())
		if usage := response.GetUsage(); usage != nil {
			fmt.Printf("\nfinish: %s, prompt tokens: %d, output tokens: %d\n",
				response.GetFinishReason(), usage.GetPromptTokenCount(), usage.GetOutputTokenCount())
		}
	}
}

// printServerInfo prints what the server is and serves.
func printServerInfo(ctx context.Context, client arbiv1.AdminServiceClient) error {
	info, err := client.GetServerInfo(ctx, &arbiv1.GetServerInfoRequest{})
	if err != nil {
		return err
	}
	model := info.GetModel()
	fmt.Printf("server: arbi-serve %s, model %s (%s, %d context tokens), backend %s on %s, kv codec %s\n",
		info.GetVersion(), model.GetName(), model.GetArchitecture(), model.GetMaxContextTokens(),
		info.GetBackend(), info.GetDevice(), info.GetKvCodec())
	return nil
}
