// A real Ferry cluster for the tests: a redis-server of its own and `ferry node` processes on
// loopback, each a gateway with a plain ws:// listener, started from config files as an operator
// would, and stopped, killed or frozen by the test.

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Text;
using System.Threading;

namespace Ferry.Client.Tests
{
    /// <summary>A cluster of `ferry node` processes on one redis-server.</summary>
    sealed class Cluster : IDisposable
    {
        /// <summary>The token the test clients present.</summary>
        public const string Token = "test-token";

        readonly string ferry;
        readonly string dir;
        readonly string redisUrl;
        readonly Dictionary<string, Process> nodes = new Dictionary<string, Process>();
        readonly Dictionary<string, string> admins = new Dictionary<string, string>();
        readonly Dictionary<string, string> websockets = new Dictionary<string, string>();
        Process redis;

        Cluster(string ferry, string dir, string redisUrl)
        {
            this.ferry = ferry;
            this.dir = dir;
            this.redisUrl = redisUrl;
        }

        /// <summary>Starts redis-server and the nodes <paramref name="ids"/>, with the `ferry` binary at <paramref name="ferry"/>.</summary>
        public static Cluster Start(string ferry, params string[] ids)
        {
            if (!File.Exists(ferry))
                throw new Exception(ferry + " does not exist: build it with `cargo build -p ferry-tools --bin ferry`, or set FERRY_BIN");
            string dir = Path.Combine(Path.GetTempPath(), "ferry-client-cs-" + Guid.NewGuid().ToString("N"));
            Directory.CreateDirectory(dir);
            int port = FreePort();
            var cluster = new Cluster(ferry, dir, "redis://127.0.0.1:" + port + "/");
            try
            {
                Run(ferry, "certs --out " + Path.Combine(dir, "certs") + " --nodes " + string.Join(",", ids) + " --gateway localhost");
                File.WriteAllText(Path.Combine(dir, "tokens.txt"), Token + " tester\n");
                cluster.redis = Spawn("redis-server", "--port " + port + " --bind 127.0.0.1 --save \"\" --appendonly no", dir);
                WaitForLine(cluster.redis, "redis-server", line => line.Contains("Ready to accept connections"));
                foreach (string id in ids) cluster.StartNode(id);
                return cluster;
            }
            catch
            {
                cluster.Dispose();
                throw;
            }
        }

        /// <summary>Node <paramref name="id"/>'s WebSocket gateway URL.</summary>
        public string WebSocket(string id)
        {
            return websockets[id];
        }

        void StartNode(string id)
        {
            string config = Path.Combine(dir, id + ".toml");
            File.WriteAllText(config, string.Join("\n", new[]
            {
                "id = \"" + id + "\"",
                "mesh_listen = \"127.0.0.1:0\"",
                "certs = \"certs\"",
                "store = \"" + redisUrl + "\"",
                "store_prefix = \"cs\"",
                "lease_ttl_ms = 10000",
                "refresh_ms = 200",
                "admin = \"127.0.0.1:0\"",
                "sessions_listen = \"127.0.0.1:0\"",
                "sessions_cert = \"certs/gateway.pem\"",
                "sessions_key = \"certs/gateway.key\"",
                "sessions_tokens = \"tokens.txt\"",
                "sessions_websocket = \"127.0.0.1:0\"",
                "sessions_websocket_plain = true",
                "",
            }));
            Process node = Spawn(ferry, "node --config " + config, dir);
            nodes[id] = node;
            string ready = WaitForLine(node, "node " + id, line => line.StartsWith("ready " + id + " ", StringComparison.Ordinal));
            foreach (string part in ready.Split(' '))
            {
                if (part.StartsWith("admin=", StringComparison.Ordinal)) admins[id] = part.Substring("admin=".Length);
                if (part.StartsWith("websocket=", StringComparison.Ordinal)) websockets[id] = "ws://" + part.Substring("websocket=".Length) + "/";
            }
        }

        /// <summary>A request to node <paramref name="id"/>'s admin endpoint; the answer's text.</summary>
        public string Admin(string id, string method, string path, string body = null)
        {
            var request = (HttpWebRequest)WebRequest.Create("http://" + admins[id] + path);
            request.Method = method;
            request.Timeout = 60000;
            request.ReadWriteTimeout = 60000;
            if (body != null)
            {
                request.ContentType = "application/json";
                byte[] bytes = Encoding.UTF8.GetBytes(body);
                using (Stream stream = request.GetRequestStream()) stream.Write(bytes, 0, bytes.Length);
            }
            try
            {
                using (var response = (HttpWebResponse)request.GetResponse())
                using (var reader = new StreamReader(response.GetResponseStream())) return reader.ReadToEnd();
            }
            catch (WebException e) when (e.Response != null)
            {
                using (var reader = new StreamReader(e.Response.GetResponseStream()))
                    throw new Exception(method + " " + path + " on " + id + ": " + reader.ReadToEnd());
            }
        }

        /// <summary>A chat room on node <paramref name="id"/> with <paramref name="players"/> in it.</summary>
        public void ChatRoom(string id, string room, params string[] players)
        {
            Admin(id, "POST", "/units", "{\"kind\":\"spot\",\"factory\":\"chat-room\",\"id\":\"" + room + "\"}");
            foreach (string player in players)
                Admin(id, "POST", "/units", "{\"kind\":\"actor\",\"factory\":\"chatter\",\"id\":\"" + player + "\",\"join\":\"" + room + "\"}");
        }

        /// <summary>Drains node <paramref name="id"/>: every unit moves off it.</summary>
        public void Drain(string id)
        {
            Admin(id, "POST", "/relocate", "{\"mode\":\"maintenance\",\"deadline_ms\":20000}");
        }

        /// <summary>How many units node <paramref name="id"/> hosts now.</summary>
        public long Units(string id)
        {
            long units;
            if (!Json.Parse(Admin(id, "GET", "/status")).Member("units").TryGetCount(out units))
                throw new Exception("the status of " + id + " has no unit count");
            return units;
        }

        /// <summary>Kills node <paramref name="id"/> at once (SIGKILL), as a crash would.</summary>
        public void Kill(string id)
        {
            Process node = nodes[id];
            nodes.Remove(id);
            if (!node.HasExited) node.Kill();
            node.WaitForExit();
        }

        /// <summary>Stops node <paramref name="id"/> cleanly (SIGTERM): its clients are told to go elsewhere.</summary>
        public void Terminate(string id)
        {
            Process node = nodes[id];
            nodes.Remove(id);
            Stop(node);
        }

        /// <summary>Freezes node <paramref name="id"/> (SIGSTOP): its connections stay open and nothing answers, as with a lost host.</summary>
        public void Freeze(string id)
        {
            Signal(nodes[id], "STOP");
        }

        /// <summary>Kills every node (the tests are over: nothing to drain) and stops the redis-server, and removes the files.</summary>
        public void Dispose()
        {
            foreach (string id in new List<string>(nodes.Keys)) Kill(id);
            if (redis != null) Stop(redis);
            try
            {
                Directory.Delete(dir, true);
            }
            catch (IOException)
            {
                // Left for the system's temporary-file cleanup.
            }
        }

        static void Stop(Process process)
        {
            if (process.HasExited) return;
            Signal(process, "TERM");
            if (!process.WaitForExit(10000))
            {
                process.Kill();
                process.WaitForExit();
            }
        }

        static void Signal(Process process, string signal)
        {
            Run("kill", "-" + signal + " " + process.Id);
        }

        static int FreePort()
        {
            var listener = new TcpListener(IPAddress.Loopback, 0);
            listener.Start();
            int port = ((IPEndPoint)listener.LocalEndpoint).Port;
            listener.Stop();
            return port;
        }

        static void Run(string file, string arguments)
        {
            var info = new ProcessStartInfo(file, arguments)
            {
                UseShellExecute = false,
                RedirectStandardOutput = true,
                RedirectStandardError = true,
            };
            using (Process process = Process.Start(info))
            {
                string output = process.StandardOutput.ReadToEnd() + process.StandardError.ReadToEnd();
                process.WaitForExit();
                if (process.ExitCode != 0) throw new Exception(file + " " + arguments + " failed: " + output);
            }
        }

        /// <summary>Starts a process whose stdout the tests read line by line; its stderr goes to ours.</summary>
        static Process Spawn(string file, string arguments, string workingDirectory)
        {
            var info = new ProcessStartInfo(file, arguments)
            {
                UseShellExecute = false,
                RedirectStandardOutput = true,
                WorkingDirectory = workingDirectory,
            };
            info.EnvironmentVariables["RUST_LOG"] = "warn";
            // A node reads FERRY_* variables as its config keys; this one is the tests' own.
            info.EnvironmentVariables.Remove("FERRY_BIN");
            var process = new Process { StartInfo = info, EnableRaisingEvents = true };
            var lines = new Queue<string>();
            process.OutputDataReceived += (sender, e) =>
            {
                lock (lines)
                {
                    lines.Enqueue(e.Data);
                    Monitor.PulseAll(lines);
                }
            };
            Lines[process] = lines;
            process.Start();
            process.BeginOutputReadLine();
            return process;
        }

        /// <summary>Each spawned process's stdout lines not read yet; a null line is its end.</summary>
        static readonly Dictionary<Process, Queue<string>> Lines = new Dictionary<Process, Queue<string>>();

        /// <summary>Waits up to 60 s for a line of <paramref name="process"/>'s stdout that <paramref name="accept"/> takes.</summary>
        static string WaitForLine(Process process, string what, Func<string, bool> accept)
        {
            Queue<string> lines = Lines[process];
            var deadline = DateTime.UtcNow.AddSeconds(60);
            lock (lines)
            {
                while (true)
                {
                    while (lines.Count > 0)
                    {
                        string line = lines.Dequeue();
                        if (line == null) throw new Exception(what + ": exited before it was ready");
                        if (accept(line)) return line;
                    }
                    TimeSpan left = deadline - DateTime.UtcNow;
                    if (left <= TimeSpan.Zero) throw new Exception(what + ": no ready line within 60 s");
                    Monitor.Wait(lines, left);
                }
            }
        }
    }
}
