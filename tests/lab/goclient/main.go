// Command goclient runs the official RocketMQ Go client v2 (classic remoting protocol) for the
// compatibility lab: one command per run, a JSON request on stdin, one "LAB-RESULT <json>" line
// on stdout (everything else is client logging); a failure prints "LAB-ERROR <message>" and
// exits 1. Built at test time into the lab cache by tests/support/go_client.py.
//
// Commands:
//
//	produce      {"namesrv", "group", "sends": [{"message": spec, "order_key"} | {"batch": [spec, ...]}]}
//	             (an order key is the message's sharding key: the hash queue selector puts equal
//	             keys in one queue)
//	push         {"namesrv", "group", "topic", "expect": [bodies], "fail_once": [bodies],
//	              "max_reconsume_times", "timeout_ms", "orderly"} (orderly: a failure suspends the
//	              queue and the same message comes again before its successors)
//	transaction  {"namesrv", "group", "messages": [spec + "outcome": "commit" | "rollback" |
//	              "unknown", "check": the answer to the broker's check-back], "linger_ms"}:
//	              a TransactionProducer; one result per message with its local state
//
// A spec is {"topic", "tags", "keys": [..], "properties": {..}, "body"}.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

type spec struct {
	Topic      string            `json:"topic"`
	Tags       string            `json:"tags"`
	Keys       []string          `json:"keys"`
	Properties map[string]string `json:"properties"`
	Body       string            `json:"body"`
}

type send struct {
	Message  *spec  `json:"message"`
	OrderKey string `json:"order_key"`
	Batch    []spec `json:"batch"`
}

type transactional struct {
	spec
	Outcome string `json:"outcome"`
	Check   string `json:"check"`
}

type request struct {
	Namesrv           string          `json:"namesrv"`
	Group             string          `json:"group"`
	Sends             []send          `json:"sends"`
	Topic             string          `json:"topic"`
	Expect            []string        `json:"expect"`
	FailOnce          []string        `json:"fail_once"`
	MaxReconsumeTimes int32           `json:"max_reconsume_times"`
	TimeoutMs         int64           `json:"timeout_ms"`
	Orderly           bool            `json:"orderly"`
	Messages          []transactional `json:"messages"`
	LingerMs          int64           `json:"linger_ms"`
}

func main() {
	rlog.SetLogLevel("error")
	if len(os.Args) != 2 {
		fail(fmt.Errorf("usage: goclient <command> (request JSON on stdin)"))
	}
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	var req request
	if err := json.Unmarshal(input, &req); err != nil {
		fail(err)
	}
	var result interface{}
	switch os.Args[1] {
	case "produce":
		result, err = produce(req)
	case "push":
		result, err = push(req)
	case "transaction":
		result, err = transaction(req)
	default:
		err = fmt.Errorf("unknown command %s", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
	encoded, err := json.Marshal(result)
	if err != nil {
		fail(err)
	}
	fmt.Println("LAB-RESULT " + string(encoded))
	os.Exit(0)
}

func fail(err error) {
	fmt.Println("LAB-ERROR " + err.Error())
	os.Exit(1)
}

func build(s spec) *primitive.Message {
	message := primitive.NewMessage(s.Topic, []byte(s.Body))
	if s.Tags != "" {
		message.WithTag(s.Tags)
	}
	if len(s.Keys) > 0 {
		message.WithKeys(s.Keys)
	}
	for key, value := range s.Properties {
		message.WithProperty(key, value)
	}
	return message
}

func produce(req request) (interface{}, error) {
	options := []producer.Option{
		producer.WithNameServer([]string{req.Namesrv}),
		producer.WithGroupName(req.Group),
		producer.WithInstanceName(fmt.Sprintf("go-lab-%d", os.Getpid())),
		producer.WithRetry(0),
		producer.WithSendMsgTimeout(30 * time.Second),
	}
	for _, each := range req.Sends {
		if each.OrderKey != "" { // sharding key → queue (others: random)
			options = append(options, producer.WithQueueSelector(producer.NewHashQueueSelector()))
			break
		}
	}
	p, err := rocketmq.NewProducer(options...)
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	defer p.Shutdown()
	results := []map[string]interface{}{}
	for _, each := range req.Sends {
		messages := []*primitive.Message{}
		if each.Message != nil {
			message := build(*each.Message)
			if each.OrderKey != "" {
				message.WithShardingKey(each.OrderKey)
			}
			messages = append(messages, message)
		}
		for _, s := range each.Batch {
			messages = append(messages, build(s))
		}
		sent, err := p.SendSync(context.Background(), messages...)
		if err != nil {
			return nil, err
		}
		results = append(results, map[string]interface{}{
			"status": sent.Status, "msg_id": sent.MsgID, "offset_msg_id": sent.OffsetMsgID,
			"topic": sent.MessageQueue.Topic, "broker": sent.MessageQueue.BrokerName,
			"queue_id": sent.MessageQueue.QueueId, "queue_offset": sent.QueueOffset,
		})
	}
	return results, nil
}

// describe is what the client decoded from one delivered message.
func describe(m *primitive.MessageExt, outcome string) map[string]interface{} {
	properties := map[string]string{}
	for key, value := range m.GetProperties() {
		properties[key] = value
	}
	keys := strings.Fields(m.GetKeys())
	sort.Strings(keys)
	return map[string]interface{}{
		"topic": m.Topic, "queue_id": m.Queue.QueueId, "queue_offset": m.QueueOffset,
		"msg_id": m.MsgId, "offset_msg_id": m.OffsetMsgId, "tags": m.GetTags(), "keys": keys,
		"properties": properties, "body": string(m.Body),
		"body_b64":        base64.StdEncoding.EncodeToString(m.Body),
		"reconsume_times": m.ReconsumeTimes, "store_host": m.StoreHost, "outcome": outcome,
	}
}

func push(req request) (interface{}, error) {
	failOnce := map[string]bool{}
	for _, body := range req.FailOnce {
		failOnce[body] = true
	}
	failed := map[string]bool{}
	var lock sync.Mutex
	pending := map[string]bool{}
	for _, body := range req.Expect {
		pending[body] = true
	}
	deliveries := []map[string]interface{}{}
	done := make(chan struct{})
	c, err := rocketmq.NewPushConsumer(
		consumer.WithNameServer([]string{req.Namesrv}),
		consumer.WithGroupName(req.Group),
		consumer.WithInstance(fmt.Sprintf("go-lab-%d", os.Getpid())),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithMaxReconsumeTimes(req.MaxReconsumeTimes),
		consumer.WithConsumerOrder(req.Orderly),
	)
	if err != nil {
		return nil, err
	}
	failure := consumer.ConsumeRetryLater
	if req.Orderly {
		failure = consumer.SuspendCurrentQueueAMoment
	}
	listener := func(ctx context.Context, messages ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		lock.Lock()
		defer lock.Unlock()
		result := consumer.ConsumeSuccess
		for _, m := range messages {
			body := string(m.Body)
			fails := failOnce[body] && !failed[body]
			outcome := "ok"
			if fails {
				failed[body] = true
				outcome = "fail"
				result = failure
			} else {
				delete(pending, body)
			}
			deliveries = append(deliveries, describe(m, outcome))
		}
		if len(pending) == 0 {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return result, nil
	}
	if err := c.Subscribe(req.Topic, consumer.MessageSelector{}, listener); err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	defer c.Shutdown()
	select {
	case <-done:
	case <-time.After(time.Duration(req.TimeoutMs) * time.Millisecond):
		lock.Lock()
		defer lock.Unlock()
		return nil, fmt.Errorf("push: still waiting for %v after %d deliveries", pending, len(deliveries))
	}
	lock.Lock()
	defer lock.Unlock()
	return map[string]interface{}{"deliveries": deliveries}, nil
}

// outcomes answers the TransactionProducer's calls from the message's lab_outcome / lab_check
// properties.
type outcomes struct{}

func state(outcome string) primitive.LocalTransactionState {
	switch outcome {
	case "commit":
		return primitive.CommitMessageState
	case "rollback":
		return primitive.RollbackMessageState
	}
	return primitive.UnkonwnState
}

func (outcomes) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	return state(m.GetProperty("lab_outcome"))
}

func (outcomes) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	if check := m.GetProperty("lab_check"); check != "" {
		return state(check)
	}
	return state(m.GetProperty("lab_outcome"))
}

func transaction(req request) (interface{}, error) {
	p, err := rocketmq.NewTransactionProducer(outcomes{},
		producer.WithNameServer([]string{req.Namesrv}),
		producer.WithGroupName(req.Group),
		producer.WithInstanceName(fmt.Sprintf("go-lab-%d", os.Getpid())),
		producer.WithRetry(0),
		producer.WithSendMsgTimeout(30*time.Second),
	)
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	defer p.Shutdown()
	names := map[primitive.LocalTransactionState]string{primitive.CommitMessageState: "commit",
		primitive.RollbackMessageState: "rollback", primitive.UnkonwnState: "unknown"}
	results := []map[string]interface{}{}
	for _, each := range req.Messages {
		message := build(each.spec)
		message.WithProperty("lab_outcome", each.Outcome)
		if each.Check != "" {
			message.WithProperty("lab_check", each.Check)
		}
		sent, err := p.SendMessageInTransaction(context.Background(), message)
		if err != nil {
			return nil, err
		}
		results = append(results, map[string]interface{}{
			"status": sent.Status, "msg_id": sent.MsgID, "local_state": names[sent.State],
			"topic": sent.MessageQueue.Topic, "queue_id": sent.MessageQueue.QueueId,
		})
	}
	time.Sleep(time.Duration(req.LingerMs) * time.Millisecond)
	return results, nil
}
