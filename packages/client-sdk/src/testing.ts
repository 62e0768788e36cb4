export {
  FAKE_TOKENS,
  type FakeConnection,
  FakeGateway,
  type FakeGatewayOptions,
  type FakeHandler,
  type FakeRequest,
  type FakeRun,
  type FakeToolCall,
  type MethodInput,
} from "./testing/fake-gateway";
