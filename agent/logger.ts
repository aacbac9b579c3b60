import winston from 'winston';

export interface AgentLoggerOptions {
  file: string;
  /** Also log to stderr, until stderr breaks (its reader went away). */
  stderr: boolean;
}

/** JSON lines to a file; optionally also to stderr, dropped quietly once stderr breaks. */
export function createAgentLogger(options: AgentLoggerOptions): winston.Logger {
  const logger = winston.createLogger({
    level: 'info',
    format: winston.format.combine(winston.format.timestamp(), winston.format.json()),
    transports: [new winston.transports.File({ filename: options.file })],
  });
  if (options.stderr) {
    const console = new winston.transports.Console({ stderrLevels: ['error', 'warn', 'info', 'http', 'verbose', 'debug', 'silly'] });
    logger.add(console);
    process.stderr.on('error', () => logger.remove(console));
  }
  return logger;
}
