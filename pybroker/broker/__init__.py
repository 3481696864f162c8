# pybroker.broker: request handlers, pure functions of (context, channel, command).
