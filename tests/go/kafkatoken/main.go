// Command kafkatoken is franz-go logging in with a delegation token: SCRAM with
// scram.Auth{IsToken: true}, which adds Kafka's tokenauth=true extension. The token id
// and HMAC (base64) come from the environment (TOKEN_ID, TOKEN_HMAC), never the command
// line.
//
//	kafkatoken produce-consume BOOTSTRAP MECHANISM TOPIC COUNT PREFIX TIMEOUT_MS
//
// writes COUNT values PREFIX-0.. to TOPIC, then reads the topic from the beginning (no
// group) until it has them all or TIMEOUT_MS passed. One line per event on stdout,
// tab-separated: "sent V", "received V"; an authentication failure prints
// "login-refused MESSAGE" and exits 3; any other failure prints "error MESSAGE" and
// exits 1.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

const refused = 3

func emit(event, detail string) {
	fmt.Printf("%s\t%s\n", event, strings.ReplaceAll(detail, "\n", " "))
}

func fail(err error) {
	if errors.Is(err, kerr.SaslAuthenticationFailed) {
		emit("login-refused", err.Error())
		os.Exit(refused)
	}
	emit("error", err.Error())
	os.Exit(1)
}

func mechanism(name string) (sasl.Mechanism, error) {
	auth := scram.Auth{User: os.Getenv("TOKEN_ID"), Pass: os.Getenv("TOKEN_HMAC"), IsToken: true}
	switch name {
	case "SCRAM-SHA-256":
		return auth.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return auth.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("unknown mechanism %s", name)
}

func produceConsume(bootstrap, mechanismName, topic string, count int, prefix string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	mech, err := mechanism(mechanismName)
	if err != nil {
		return err
	}
	common := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.SASL(mech),
		kgo.ClientID("kafka-token-client"),
		kgo.RetryTimeout(timeout),
	}
	producer, err := kgo.NewClient(append(common, kgo.AllowAutoTopicCreation(),
		kgo.RecordDeliveryTimeout(timeout), kgo.RequiredAcks(kgo.AllISRAcks()))...)
	if err != nil {
		return err
	}
	defer producer.Close()
	// A login the broker refuses fails Ping at once (produce requests retry it).
	if err := producer.Ping(ctx); err != nil {
		return err
	}
	for i := 0; i < count; i++ {
		value := fmt.Sprintf("%s-%d", prefix, i)
		if err := producer.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr(); err != nil {
			return err
		}
		emit("sent", value)
	}
	consumer, err := kgo.NewClient(append(common, kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer consumer.Close()
	received := 0
	for received < count {
		fetches := consumer.PollFetches(ctx)
		for _, fetchErr := range fetches.Errors() {
			return fetchErr.Err
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if value := string(r.Value); strings.HasPrefix(value, prefix+"-") {
				emit("received", value)
				received++
			}
		})
	}
	return nil
}

func main() {
	if len(os.Args) != 8 || os.Args[1] != "produce-consume" {
		fail(errors.New("usage: kafkatoken produce-consume BOOTSTRAP MECHANISM TOPIC COUNT PREFIX TIMEOUT_MS"))
	}
	count, err := strconv.Atoi(os.Args[5])
	if err != nil {
		fail(err)
	}
	timeoutMs, err := strconv.Atoi(os.Args[7])
	if err != nil {
		fail(err)
	}
	if err := produceConsume(os.Args[2], os.Args[3], os.Args[4], count, os.Args[6], time.Duration(timeoutMs)*time.Millisecond); err != nil {
		fail(err)
	}
}
