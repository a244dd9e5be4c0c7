// A gateway that goes wrong on purpose: a WebSocket server on loopback that answers the client's
// frames with the frames a test scripts, the last of them one a real gateway never sends. A Ferry
// node cannot be made to send a malformed frame, so this stands in for a broken or foreign one.

using System;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using System.Text;
using System.Threading.Tasks;

namespace Ferry.Client.Tests
{
    sealed class BadGateway : IDisposable
    {
        readonly TcpListener listener = new TcpListener(IPAddress.Loopback, 0);
        readonly Task serving;

        /// <summary>
        /// Serves one client: after each of its frames, the next of <paramref name="answers"/> (null: none), then
        /// once they are all sent, <paramref name="last"/>.
        /// </summary>
        public BadGateway(string[] answers, string last)
        {
            listener.Start();
            serving = Task.Run(() => Serve(answers, last));
        }

        public string Url
        {
            get { return "ws://127.0.0.1:" + ((IPEndPoint)listener.LocalEndpoint).Port + "/"; }
        }

        /// <summary>The close status the client sent, once the client is done (0 if none).</summary>
        public int ClientCloseStatus { get; private set; }

        void Serve(string[] answers, string last)
        {
            using (TcpClient client = listener.AcceptTcpClient())
            using (NetworkStream stream = client.GetStream())
            {
                Handshake(stream);
                foreach (string answer in answers)
                {
                    ReadFrame(stream);
                    if (answer != null) WriteText(stream, answer);
                }
                WriteText(stream, last);
                while (true)
                {
                    byte[] payload;
                    int opcode = ReadFrame(stream, out payload);
                    if (opcode == 8)
                    {
                        ClientCloseStatus = payload.Length >= 2 ? payload[0] << 8 | payload[1] : 0;
                        return;
                    }
                }
            }
        }

        /// <summary>Waits for the client to be done with this gateway.</summary>
        public void Wait(int timeoutMs)
        {
            if (!serving.Wait(timeoutMs)) throw new Exception("the client did not close its connection");
        }

        public void Dispose()
        {
            listener.Stop();
        }

        static void Handshake(NetworkStream stream)
        {
            var request = new StringBuilder();
            while (!request.ToString().EndsWith("\r\n\r\n", StringComparison.Ordinal))
            {
                int b = stream.ReadByte();
                if (b < 0) throw new IOException("the client left during the handshake");
                request.Append((char)b);
            }
            string key = null;
            foreach (string line in request.ToString().Split(new[] { "\r\n" }, StringSplitOptions.None))
                if (line.StartsWith("Sec-WebSocket-Key:", StringComparison.OrdinalIgnoreCase)) key = line.Substring(18).Trim();
            string accept;
            using (SHA1 sha1 = SHA1.Create())
                accept = Convert.ToBase64String(sha1.ComputeHash(Encoding.ASCII.GetBytes(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")));
            byte[] response = Encoding.ASCII.GetBytes("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n" +
                "Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + "\r\n\r\n");
            stream.Write(response, 0, response.Length);
        }

        static void ReadFrame(NetworkStream stream)
        {
            byte[] payload;
            ReadFrame(stream, out payload);
        }

        /// <summary>Reads one client frame (always masked) and returns its opcode.</summary>
        static int ReadFrame(NetworkStream stream, out byte[] payload)
        {
            byte[] head = ReadExactly(stream, 2);
            long length = head[1] & 0x7f;
            if (length == 126)
            {
                byte[] extended = ReadExactly(stream, 2);
                length = extended[0] << 8 | extended[1];
            }
            else if (length == 127) throw new IOException("a test frame is never that long");
            byte[] mask = ReadExactly(stream, 4);
            payload = ReadExactly(stream, (int)length);
            for (int i = 0; i < payload.Length; i++) payload[i] ^= mask[i % 4];
            return head[0] & 0x0f;
        }

        static void WriteText(NetworkStream stream, string text)
        {
            byte[] payload = Encoding.UTF8.GetBytes(text);
            if (payload.Length > 0xffff) throw new ArgumentException("a test frame is never that long");
            stream.WriteByte(0x81);
            if (payload.Length < 126) stream.WriteByte((byte)payload.Length);
            else
            {
                stream.WriteByte(126);
                stream.WriteByte((byte)(payload.Length >> 8));
                stream.WriteByte((byte)payload.Length);
            }
            stream.Write(payload, 0, payload.Length);
        }

        static byte[] ReadExactly(NetworkStream stream, int count)
        {
            var bytes = new byte[count];
            int read = 0;
            while (read < count)
            {
                int n = stream.Read(bytes, read, count - read);
                if (n == 0) throw new IOException("the client closed the connection");
                read += n;
            }
            return bytes;
        }
    }
}
