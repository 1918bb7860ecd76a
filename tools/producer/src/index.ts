export * from './run';
export * from './scenarios';
export * from './identity';
export { client, errorCode, type Call, type ClientOptions, type Reply } from './http';
export { seededRandom, taskRandom } from './random';
