export * from './run';
export * from './scenarios';
export { client } from './http';
